"""The startup lines a vLLM release prints about memory, in that release's exact format (the rows of
formats.py). Durations cannot be predicted; they are printed as '?' where the real line has seconds."""
from __future__ import annotations

from dataclasses import dataclass

from ....units import GIB
from .formats import LINES, formats_at


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


def _fields(f: LogFigures) -> dict:
    gib = lambda value: value / GIB  # noqa: E731 - local shorthand for the printf-style fields
    return {
        "weights": gib(f.weights_bytes), "weights_short": format_gib(f.weights_bytes), "kv": gib(f.kv_bytes),
        "kv_short": format_gib(f.kv_bytes), "graph": gib(f.graph_bytes), "graph_estimate": gib(f.graph_estimate_bytes),
        "total": gib(f.total_bytes), "requested": gib(f.total_bytes * f.utilization),
        "non_torch": gib(f.non_torch_bytes), "activation": gib(f.activation_bytes),
        "initial": gib(f.weights_bytes + f.context_bytes), "peak_torch": gib(f.weights_bytes + f.activation_bytes),
        "post_profile": gib(f.weights_bytes + f.non_torch_bytes), "utilization": f.utilization,
        "gpu_blocks": f.num_gpu_blocks, "cpu_blocks": f.num_cpu_blocks, "kv_tokens": f.kv_tokens,
        "max_len": f.max_model_len, "concurrency": f.max_concurrency, "seconds": "?",
        "graph_short": format_gib(f.graph_bytes), "graph_estimate_short": format_gib(f.graph_estimate_bytes),
        "graph_difference_short": format_gib(abs(f.graph_bytes - f.graph_estimate_bytes)),
        "graph_difference_percent": 100 * abs(f.graph_bytes - f.graph_estimate_bytes) / max(f.graph_bytes, 1),
    }


# lines printed only when the release captures CUDA graphs
_GRAPH_LINES = ("graph_estimate", "graph", "graph_pool")


def log_lines(release, figures: LogFigures) -> tuple[str, ...]:
    """What `release` (a releases.Release: its version and engine path) prints for these figures."""
    formats = formats_at(tuple(release.version), release.engine)
    fields = _fields(figures)
    lines: list[str] = []
    for name in LINES:
        if name in _GRAPH_LINES and not figures.graphs_captured:
            continue
        lines += [line.format(**fields) for line in formats[name].lines]
    return tuple(lines)
