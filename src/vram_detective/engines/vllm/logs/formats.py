"""vLLM's memory lines, one row per format: what the line says (`template`, what `explain` prints for the
releases of that row), the releases that print it (`since`, and `until` = the next row of the same line), where
vLLM prints it (`source`: file and release), how a log in that format is told apart (`marker`, the era it pins)
and which of the reader's patterns pick its figures up (`read_by`, names in reader.PATTERNS).

The eras `logs` and `score` infer from a log's format (eras.py) and the lines `explain` prints (lines.py) are
both read from this one table. Formats: design/vllm-memory.md §2; templates checked against the format strings
of the released wheels (`shared/tools/engine-src vllm VERSION`) and against the real logs of groundtruth/.

Template fields (filled by lines.py): weights, kv, graph, graph_estimate (and graph_short, graph_estimate_short,
graph_difference_short: round(b / GiB, 2)'s text; graph_difference_percent), total, requested, non_torch,
activation, initial, peak_torch, post_profile (GiB as floats), weights_short / kv_short (format_gib's text, 0.15+),
utilization, gpu_blocks, cpu_blocks, kv_tokens, max_len, concurrency; seconds is printed as "?" (durations cannot
be predicted). A template of several lines holds them separated by newlines.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from ...common.rules import Rule, rows_in_force, until

Version = tuple[int, ...]


@dataclass(frozen=True)
class LogFormat:
    template: str | None  # None: the releases of this row print no such line
    read_by: tuple[str, ...] = ()  # the reader patterns (reader.PATTERNS) that read it back
    marker: str | None = None  # a regex only this format (and later ones of the same line) matches
    era: str | None = None  # the marker's name (FormatMarkers.eras, the scorer's inferred release)
    infer_as: str | None = None  # the release a log with the marker is read as (default: the row's since)
    after: str | None = None  # the marker counts only after a line matching this one
    evidence: str = ""  # the marker in words (the inferred-release explanation)
    printed_by: str = ""  # the releases that print it, in words (`logs` explains the inferred release with it)

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(self.template.split("\n")) if self.template else ()


NOT_PRINTED = LogFormat(None)
_MEMORY = "Memory profiling results: total_gpu_memory={total:.2f}GiB"


def _row(since: str, line: str, value: LogFormat, source: str, path: str | None = None) -> Rule[LogFormat]:
    return Rule(tuple(int(x) for x in since.split(".")), line, value, source, path=path)


# fmt: off
# The lines in the order a release prints them at startup (lines.py keeps this order).
LINES = ("weights", "profile", "graph_estimate", "available_kv", "blocks", "kv_size", "graph", "graph_pool")

FORMATS: tuple[Rule[LogFormat], ...] = (
    # --- weights: the model runner after load_model ---
    _row("0.0.0", "weights", LogFormat(
        "Loading model weights took {weights:.4f} GB", ("weights_line",),
        r"Loading model weights took [\d.]+ GB", "weights-gb", "0.6.3",
        evidence="'Loading model weights took X GB' (V0, 0.4-0.7)", printed_by="0.4-0.6.3 (V0)"),
        "worker/model_runner.py (0.4-0.7)"),
    _row("0.8.0", "weights", LogFormat(
        "Model loading took {weights:.4f} GB and {seconds} seconds", ("model_loading",),
        r"Model loading took \d+\.\d+ GB and", "weights-gb-and",
        evidence="'Model loading took X GB and ... seconds' (0.8.0-0.8.2)", printed_by="0.8.0-0.8.2"),
        "model_runner.py / gpu_model_runner.py 0.8.0-0.8.2"),
    _row("0.8.3", "weights", LogFormat(
        "Model loading took {weights:.4f} GiB and {seconds} seconds", ("model_loading",),
        r"Model loading took \d+\.\d+ GiB and", "weights-gib-and",
        evidence="'Model loading took X GiB and ... seconds' (0.8.3-0.11)", printed_by="0.8.3-0.11"),
        "0.8.3-0.11.x"),
    _row("0.12.0", "weights", LogFormat(
        "Model loading took {weights:.4f} GiB memory and {seconds} seconds", ("model_loading",),
        r"Model loading took \d+\.\d{4} GiB memory", "weights-gib-memory",
        evidence="'Model loading took X.XXXX GiB memory' (0.12-0.13)", printed_by="0.12-0.13"),
        "gpu_model_runner.py 0.12-0.13", "v1"),
    _row("0.15.0", "weights", LogFormat(
        "Model loading took {weights_short} GiB memory and {seconds} seconds", ("model_loading",),
        r"Model loading took \d+\.\d{1,2} GiB memory", "weights-format-gib",
        evidence="'Model loading took X GiB memory' with format_gib's 1-2 decimals (0.15+)",
        printed_by="0.15 or newer"),
        "format_gib (0.15+)", "v1"),

    # --- profile: V0's profiling summary (worker.py determine_num_available_blocks) ---
    _row("0.0.0", "profile", NOT_PRINTED, "no profiling summary"),
    _row("0.6.4", "profile", LogFormat(
        _MEMORY + " initial_memory_usage={initial:.2f}GiB peak_torch_memory={peak_torch:.2f}GiB "
        "memory_usage_post_profile={post_profile:.2f}GiB non_torch_memory={non_torch:.2f}GiB "
        "kv_cache_size={kv:.2f}GiB gpu_memory_utilization={utilization:.2f}",
        ("profiling_results", "total_gpu_memory", "utilization_printed"),
        r"Memory profiling results: total_gpu_memory", "profiling-results",
        evidence="'Memory profiling results: total_gpu_memory=...' (V0, 0.6.4.x)", printed_by="0.6.4.x (V0)"),
        "'Memory profiling results: total_gpu_memory=...' (0.6.4.x)", "v0"),
    _row("0.6.5", "profile", LogFormat(
        "Memory profiling takes {seconds} seconds\n"
        "the current vLLM instance can use total_gpu_memory ({total:.2f}GiB) x gpu_memory_utilization "
        "({utilization:.2f}) = {requested:.2f}GiB\n"
        "model weights take {weights:.2f}GiB; non_torch_memory takes {non_torch:.2f}GiB; PyTorch activation peak "
        "memory takes {activation:.2f}GiB; the rest of the memory reserved for KV Cache is {kv:.2f}GiB.",
        ("profiling_takes", "total_gpu_memory", "utilization_printed", "requested_v0", "weights_summary",
         "non_torch_summary", "activation_summary", "kv_summary"),
        r"Memory profiling takes|the current vLLM instance can use", "profiling-takes",
        evidence="the three-line 'Memory profiling takes ...' summary (V0, 0.6.5+)", printed_by="0.6.5-0.10 (V0)"),
        "three lines: 'Memory profiling takes ...' (0.6.5-0.10)", "v0"),

    # --- graph_estimate: GPUModelRunner.profile_cudagraph_memory ---
    _row("0.0.0", "graph_estimate", NOT_PRINTED, "not printed"),
    _row("0.18.0", "graph_estimate", LogFormat(
        "Estimated CUDA graph memory: {graph_estimate:.2f} GiB total", ("graph_estimate",)),
        "'Estimated CUDA graph memory: %.2f GiB total' (0.18+)", "v1"),

    # --- available_kv: the V1 worker's budget (gpu_worker.py determine_available_memory) ---
    _row("0.0.0", "available_kv", NOT_PRINTED, "not printed"),
    _row("0.9.1", "available_kv", LogFormat(
        "Available KV cache memory: {kv:.2f} GiB", ("available_kv",),
        r"Available KV cache memory", "available-kv",
        evidence="'Available KV cache memory' (V1, 0.9.1+)", printed_by="0.9.1 or newer (V1)"),
        "gpu_worker.py (0.9.1-0.13)", "v1"),
    _row("0.15.0", "available_kv", LogFormat("Available KV cache memory: {kv_short} GiB", ("available_kv",)),
         "format_gib (0.15+)", "v1"),

    # --- blocks: the block counts ---
    _row("0.0.0", "blocks", LogFormat("# GPU blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}", ("blocks",)),
         "executor/gpu_executor.py (<=0.6)", "v0"),
    _row("0.7.0", "blocks", LogFormat(
        "# CUDA blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}", ("blocks",), r"# CUDA blocks", "cuda-blocks-upper",
        evidence="'# CUDA blocks' (V0, 0.7.0-0.7.2)", printed_by="0.7.0-0.7.2 (V0)"),
        "current_platform.dispatch_key (0.7.0-0.7.2)", "v0"),
    _row("0.7.3", "blocks", LogFormat(
        "# cuda blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}", ("blocks",), r"# cuda blocks", "cuda-blocks-lower",
        evidence="'# cuda blocks' (V0, 0.7.3-0.10)", printed_by="0.7.3-0.10 (V0)"),
        "current_platform.device_name (0.7.3-0.10)", "v0"),
    _row("0.0.0", "blocks", LogFormat(
        "# GPU blocks: {gpu_blocks}", ("blocks",), r"# GPU blocks: \d+(?!\d|, # CPU)", "v1-alpha-blocks", "0.7.0",
        after=r"Loading model weights took",
        evidence="'Loading model weights took' then '# GPU blocks' without CPU blocks (V1 alpha, 0.6.4-0.7.x)",
        printed_by="0.6.4-0.7.x (V1 alpha), or a V0 line quoted without its CPU blocks"),
        "v1/engine/core.py (0.6.4-0.7.x)", "v1"),
    _row("0.8.0", "blocks", NOT_PRINTED, "replaced by the KV-size line", "v1"),

    # --- kv_size: tokens and concurrency (kv_cache_utils.py) ---
    _row("0.0.0", "kv_size", NOT_PRINTED, "not printed"),
    _row("0.6.3", "kv_size", LogFormat(
        "Maximum concurrency for {max_len} tokens per request: {concurrency:.2f}x", ("concurrency",)),
        "'Maximum concurrency for %s tokens per request: %.2fx' (0.6.3+)", "v0"),
    _row("0.7.2", "kv_size", LogFormat(
        "Maximum concurrency for {max_len} tokens per request: {concurrency:.2f}x", ("concurrency",)),
        "v1 kv_cache_utils.py logs '# GPU blocks' and the concurrency line (0.7.2-0.7.3)", "v1"),
    _row("0.8.0", "kv_size", LogFormat(
        "GPU KV cache size: {kv_tokens:,} tokens\n"
        "Maximum concurrency for {max_len:,} tokens per request: {concurrency:.2f}x", ("kv_tokens", "concurrency"),
        r"GPU KV cache size: [\d,]+ tokens", "kv-tokens",
        evidence="'GPU KV cache size: N tokens' (V1, 0.8+)", printed_by="0.8-0.27 (V1)"),
        "'GPU KV cache size: %s tokens' + concurrency line, commas (0.8-0.27)", "v1"),
    _row("0.28.0", "kv_size", LogFormat(
        "GPU KV cache size: {kv_tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per request: "
        "{concurrency:.2f}x", ("kv_tokens", "concurrency"),
        r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency", "kv-one-line",
        evidence="'GPU KV cache size: N tokens, Maximum concurrency ...' on one line (0.28+)",
        printed_by="0.28 or newer"),
        "one line 'GPU KV cache size: N tokens, Maximum concurrency ...' (0.28+)", "v1"),

    # --- graph: the end of CUDA graph capture ---
    _row("0.0.0", "graph", LogFormat("Graph capturing finished in {seconds} secs.", ("graph_capture",)),
         "V0 model_runner (<=0.6.3)"),
    _row("0.6.4", "graph", LogFormat("Graph capturing finished in {seconds} secs, took {graph:.2f} GiB",
                                     ("graph_capture",)), "0.6.4+ (cudaMemGetInfo delta)"),

    # --- graph_pool: the capture's pool beside profile_cudagraph_memory's estimate ---
    _row("0.0.0", "graph_pool", NOT_PRINTED, "not printed"),
    _row("0.18.0", "graph_pool", LogFormat(
        "CUDA graph pool memory: {graph_short} GiB (actual), {graph_estimate_short} GiB (estimated), difference: "
        "{graph_difference_short} GiB ({graph_difference_percent:.1f}%).", ("graph_pool",)),
        "gpu_worker.py compile_or_warm_up_model, round(b / GiB, 2) with %s (0.18.0-0.33.0)", "v1"),
)
# fmt: on


@lru_cache(maxsize=256)
def formats_at(version: Version, path: str) -> Mapping[str, LogFormat]:
    """line -> the format `version` prints on engine path `path` ('v0' / 'v1')."""
    return MappingProxyType({name: row.value for name, row in rows_in_force(FORMATS, tuple(version[:3]), path).items()})


def release_of(row: Rule[LogFormat]) -> str:
    """The release a log showing `row`'s marker is read as."""
    return row.value.infer_as or ".".join(str(part) for part in row.since)


# Which marker wins when a log shows several: newest first, except that the 0.8 KV-size line outranks the
# weights line of 0.8.3 (a log with both is read as 0.8.0, the release the scorer has always given it).
ERA_ORDER = ("kv-one-line", "weights-format-gib", "weights-gib-memory", "available-kv", "kv-tokens",
             "weights-gib-and", "weights-gb-and", "cuda-blocks-lower", "cuda-blocks-upper", "v1-alpha-blocks",
             "profiling-takes", "profiling-results", "weights-gb")


@lru_cache(maxsize=1)
def era_rows() -> tuple[Rule[LogFormat], ...]:
    """The rows whose marker pins an era, in ERA_ORDER (most specific first)."""
    marked = {row.value.era: row for row in FORMATS if row.value.marker}
    return tuple(marked[name] for name in ERA_ORDER)


def row_until(row: Rule[LogFormat]) -> Version | None:
    return until(FORMATS, row)
