"""The startup lines a vLLM release prints about memory, in that release's exact format (§2).

Durations cannot be predicted; they are printed as '?' where the real line has seconds.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...units import GIB
from .releases import Release


@dataclass(frozen=True)
class LogFigures:
    total_bytes: int
    utilization: float
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    context_bytes: int  # non-torch memory present before profiling (V0-d prints it inside usage)
    kv_bytes: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    kv_tokens: int
    max_concurrency: float
    max_model_len: int
    graph_bytes: int
    graph_estimate_bytes: int
    graphs_captured: bool


def format_gib(num_bytes: int) -> str:
    """vllm/utils/mem_utils.py format_gib (0.15+): str(round(b / 2**30, 2)) - '15.0', '7.5'."""
    return str(round(num_bytes / GIB, 2))


def _fill(template: str, num_bytes: int) -> str:
    return (template.replace("{gib:.4f}", f"{num_bytes / GIB:.4f}")
            .replace("{gib:.2f}", f"{num_bytes / GIB:.2f}")
            .replace("{gib_short}", format_gib(num_bytes))
            .replace("{seconds:.6f}", "?").replace("{seconds:.0f}", "?"))


def log_lines(release: Release, figures: LogFigures) -> tuple[str, ...]:
    lines = [_fill(str(release["weights_log"]), figures.weights_bytes)]
    gib = lambda value: value / GIB  # noqa: E731 - local shorthand for the printf-style lines
    profile = release["profile_log"] if release.engine == "v0" else None
    if profile == "v0-d":
        initial = figures.weights_bytes + figures.context_bytes
        lines.append(
            f"Memory profiling results: total_gpu_memory={gib(figures.total_bytes):.2f}GiB "
            f"initial_memory_usage={gib(initial):.2f}GiB "
            f"peak_torch_memory={gib(figures.weights_bytes + figures.activation_bytes):.2f}GiB "
            f"memory_usage_post_profile={gib(figures.weights_bytes + figures.non_torch_bytes):.2f}GiB "
            f"non_torch_memory={gib(figures.non_torch_bytes):.2f}GiB kv_cache_size={gib(figures.kv_bytes):.2f}GiB "
            f"gpu_memory_utilization={figures.utilization:.2f}"
        )
    elif profile == "v0-e":
        lines += [
            "Memory profiling takes ? seconds",
            f"the current vLLM instance can use total_gpu_memory ({gib(figures.total_bytes):.2f}GiB) x "
            f"gpu_memory_utilization ({figures.utilization:.2f}) = {gib(figures.total_bytes * figures.utilization):.2f}GiB",
            f"model weights take {gib(figures.weights_bytes):.2f}GiB; non_torch_memory takes "
            f"{gib(figures.non_torch_bytes):.2f}GiB; PyTorch activation peak memory takes "
            f"{gib(figures.activation_bytes):.2f}GiB; the rest of the memory reserved for KV Cache is "
            f"{gib(figures.kv_bytes):.2f}GiB.",
        ]
    if release["graph_estimate_log"] and figures.graphs_captured:
        lines.append(f"Estimated CUDA graph memory: {gib(figures.graph_estimate_bytes):.2f} GiB total")
    if release["available_kv_log"]:
        lines.append(_fill(str(release["available_kv_log"]), figures.kv_bytes))
    blocks_log = release["blocks_log"]
    if blocks_log:
        lines.append(str(blocks_log).format(gpu=figures.num_gpu_blocks, cpu=figures.num_cpu_blocks))
    concurrency = release["concurrency_log"]
    if concurrency == "plain":
        lines.append(f"Maximum concurrency for {figures.max_model_len} tokens per request: {figures.max_concurrency:.2f}x")
    elif concurrency == "two-lines":  # max_model_len with thousands separators from 0.8
        lines.append(f"GPU KV cache size: {figures.kv_tokens:,} tokens")
        lines.append(f"Maximum concurrency for {figures.max_model_len:,} tokens per request: {figures.max_concurrency:.2f}x")
    elif concurrency == "one-line":
        lines.append(
            f"GPU KV cache size: {figures.kv_tokens:,} tokens, Maximum concurrency for "
            f"{figures.max_model_len:,} tokens per request: {figures.max_concurrency:.2f}x"
        )
    if figures.graphs_captured:
        lines.append(_fill(str(release["graph_log"]), figures.graph_bytes))
    return tuple(lines)
