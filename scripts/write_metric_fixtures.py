"""Write the /metrics texts `watch`'s tests replay (tests/data/metrics/ENGINE-RELEASE/0.txt, 1.txt, ...): four
scrapes of a server under load, in the metric names, labels, types and buckets each release registers (read from
its source: vLLM v1/metrics/loggers.py and CacheConfig; SGLang srt/observability/metrics_collector.py) and
through prometheus_client's own exposition (what both engines serve); llama-server's text as server.cpp writes
it by hand. The values are made up (one story, llama-server's build b6150 being llama-cpp-python 0.3.16's vendored tree: requests arrive, the pool fills to 61 % and drains); the format is
the engines'.

usage: python scripts/write_metric_fixtures.py      (needs prometheus_client: pip install prometheus-client)
"""
from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "metrics"
MODEL = "Qwen/Qwen3-8B"
# the story, one entry per scrape: pool usage, running, waiting, finished requests, their prompt / output lengths
USAGE = (0.10, 0.48, 0.61, 0.35)
RUNNING = (2, 9, 12, 6)
WAITING = (0, 1, 3, 0)
FINISHED = (0, 12, 25, 40)
PROMPTS = [700 + 37 * (i % 9) * 10 for i in range(40)]  # 700 .. 3660 tokens
OUTPUTS = [150 + 13 * (i % 7) * 10 for i in range(40)]  # 150 .. 930 tokens


def _older(release: str, than: str) -> bool:
    return tuple(int(x) for x in release.split(".")) < tuple(int(x) for x in than.split("."))


def _buckets_125(max_value: int) -> list[int]:
    """vLLM's build_1_2_5_buckets(max_model_len): 1, 2, 5, 10, 20, 50, ... up to max_value."""
    out, exponent = [], 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10 ** exponent
            if value > max_value:
                return out
            out.append(value)
        exponent += 1


# CacheConfig's fields as each release's metrics_info() prints them (str(value) of every field), in field order
VLLM_CACHE_CONFIG = {
    "0.9.0": {"block_size": "16", "gpu_memory_utilization": "0.9", "swap_space": "4", "cache_dtype": "auto",
              "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
              "enable_prefix_caching": "True", "prefix_caching_hash_algo": "builtin", "cpu_offload_gb": "0",
              "calculate_kv_scales": "False", "num_gpu_blocks": "2040", "num_cpu_blocks": "1820"},
    "0.19.0": {"block_size": "16", "gpu_memory_utilization": "0.9", "swap_space": "4", "cache_dtype": "auto",
               "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
               "enable_prefix_caching": "True", "prefix_caching_hash_algo": "sha256", "cpu_offload_gb": "0",
               "calculate_kv_scales": "False", "kv_sharing_fast_prefill": "False", "mamba_page_size_padded": "None",
               "kv_offloading_size": "None", "num_gpu_blocks": "2040", "num_cpu_blocks": "None"},
}


def vllm(release: str, scrape: int) -> bytes:
    import prometheus_client

    # 0.9's vllm/engine/metrics.py (imported by the V1 server too) calls disable_created_metrics(); 0.19 does not
    (prometheus_client.disable_created_metrics if _older(release, "0.10") else
     prometheus_client.enable_created_metrics)()
    registry = CollectorRegistry()
    labels = {"model_name": MODEL, "engine": "0"}
    names = list(labels)
    Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", names,
          registry=registry, multiprocess_mode="mostrecent").labels(**labels).set(RUNNING[scrape])
    Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", names,
          registry=registry, multiprocess_mode="mostrecent").labels(**labels).set(WAITING[scrape])
    usage_name = "vllm:gpu_cache_usage_perc" if _older(release, "0.10") else "vllm:kv_cache_usage_perc"
    Gauge(usage_name, "KV-cache usage. 1 means 100 percent usage.", names, registry=registry,
          multiprocess_mode="mostrecent").labels(**labels).set(USAGE[scrape])
    done = FINISHED[scrape]
    Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", names,
            registry=registry).labels(**labels).inc(sum(PROMPTS[:done]))
    Counter("vllm:generation_tokens", "Number of generation tokens processed.", names,
            registry=registry).labels(**labels).inc(sum(OUTPUTS[:done]))
    success = Counter("vllm:request_success", "Count of successfully processed requests.", names + ["finished_reason"],
                      registry=registry)
    for reason, share in (("stop", done - done // 5), ("length", done // 5), ("abort", 0)):
        success.labels(**labels, finished_reason=reason).inc(share)
    for name, lengths, doc in (("vllm:request_prompt_tokens", PROMPTS, "Number of prefill tokens processed."),
                               ("vllm:request_generation_tokens", OUTPUTS, "Number of generation tokens processed.")):
        histogram = Histogram(name, doc, names, buckets=_buckets_125(40960), registry=registry).labels(**labels)
        for value in lengths[:done]:
            histogram.observe(value)
    info = VLLM_CACHE_CONFIG[release]
    Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", list(info) + ["engine"],
          registry=registry, multiprocess_mode="mostrecent").labels(**info, engine="0").set(1)
    return generate_latest(registry)


SGLANG_DEFAULT_BUCKETS = [100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 12500,
                          15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000, 200000,
                          300000, 400000, 600000, 800000, 1000000, 1100000]


def sglang(release: str, scrape: int) -> bytes:
    import prometheus_client

    prometheus_client.enable_created_metrics()
    registry = CollectorRegistry()
    scheduler = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    names = list(scheduler)
    gauges = (("sglang:num_running_reqs", "The number of running requests.", RUNNING[scrape]),
              ("sglang:num_used_tokens", "The number of used tokens.", int(USAGE[scrape] * 110921)),
              ("sglang:token_usage", "The token usage.", USAGE[scrape]),
              ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", WAITING[scrape]),
              ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", 110921))
    for name, doc, value in gauges:
        Gauge(name, doc, names, registry=registry, multiprocess_mode="mostrecent").labels(**scheduler).set(value)
    tokenizer = {"model_name": MODEL, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    done = FINISHED[scrape]
    for name, doc, value in (("sglang:prompt_tokens", "Number of prefill tokens processed.", sum(PROMPTS[:done])),
                             ("sglang:generation_tokens", "Number of generation tokens processed.",
                              sum(OUTPUTS[:done])),
                             ("sglang:num_requests", "Number of requests processed.", done)):
        Counter(name, doc, list(tokenizer) + ["is_streaming"], registry=registry).labels(
            **tokenizer, is_streaming="True").inc(value)
    for name, lengths, doc in (("sglang:prompt_tokens_histogram", PROMPTS, "Histogram of prompt token length."),
                               ("sglang:generation_tokens_histogram", OUTPUTS,
                                "Histogram of generation token length.")):
        histogram = Histogram(name, doc, list(tokenizer), buckets=SGLANG_DEFAULT_BUCKETS, registry=registry)
        child = histogram.labels(**tokenizer)
        for value in lengths[:done]:
            child.observe(value)
    return generate_latest(registry)


def llamacpp(release: str, scrape: int) -> bytes:
    """server.cpp's handler: for each (name, help, value) `# HELP llamacpp:NAME HELP`, `# TYPE llamacpp:NAME TYPE`,
    `llamacpp:NAME VALUE`; value printed by std::ostream (no exponent for these sizes)."""
    done = FINISHED[scrape]
    rows = (("counter", "prompt_tokens_total", "Number of prompt tokens processed.", sum(PROMPTS[:done])),
            ("counter", "prompt_seconds_total", "Prompt process time", round(0.0004 * sum(PROMPTS[:done]), 3)),
            ("counter", "tokens_predicted_total", "Number of generation tokens processed.", sum(OUTPUTS[:done])),
            ("counter", "tokens_predicted_seconds_total", "Predict process time",
             round(0.012 * sum(OUTPUTS[:done]), 3)),
            ("counter", "n_decode_total", "Total number of llama_decode() calls", sum(OUTPUTS[:done])),
            ("gauge", "n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
             RUNNING[scrape]),
            ("gauge", "prompt_tokens_seconds", "Average prompt throughput in tokens/s.", 2412.5),
            ("gauge", "predicted_tokens_seconds", "Average generation throughput in tokens/s.", 81.7),
            ("gauge", "requests_processing", "Number of requests processing.", min(RUNNING[scrape], 4)),
            ("gauge", "requests_deferred", "Number of requests deferred.", WAITING[scrape]))
    text = "".join(f"# HELP llamacpp:{name} {help_}\n# TYPE llamacpp:{name} {kind}\nllamacpp:{name} {value}\n"
                   for kind, name, help_, value in rows)
    return text.encode()


WRITERS = {("vllm", "0.9.0"): vllm, ("vllm", "0.19.0"): vllm, ("sglang", "0.5.23"): sglang,
           ("llamacpp", "b6150"): llamacpp}


def main() -> int:
    for (engine, release), writer in WRITERS.items():
        folder = OUT / f"{engine}-{release}"
        folder.mkdir(parents=True, exist_ok=True)
        for scrape in range(len(USAGE)):
            (folder / f"{scrape}.txt").write_bytes(writer(release, scrape))
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
