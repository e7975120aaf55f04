"""Read a vLLM log of any era (0.2 -> 0.33) line by line and pull out every memory figure it printed.

The input is streamed: a log of any size is read in 1 MiB chunks, one line at a time, and only the
figures are kept (never the text). Every line is cleaned first (ANSI colours, "\\r" progress bars,
"[repeated 7x across cluster]"), split where several log records were glued onto one line (Ray, copied
excerpts), and its worker prefix is read ("(VllmWorker TP1 pid=...)", "(RayWorkerWrapper pid=..., ip=...)",
"(EngineCore_DP0 pid=...)", "(Worker_TP0 pid=...)", none for the V0 driver) so that figures are kept per
rank. A log that holds several starts (a restart, two versions compared) is split into runs.

Figures carry SCHEMA.md's `observed` key names (shared/groundtruth/SCHEMA.md): sizes in GiB as printed
(vLLM's "GB" is GiB; the 0.3-era "MB" is MiB), counts as integers. Formats: design/vllm-memory.md §2.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from ....forensics.serving import ServingStats
from ....textlog import MAX_LINE_CHARS, LineReader, LogInputError
from .eras import (  # noqa: F401 - the era functions, read through the engine with the reader
    FormatMarkers, engine_from_markers, era_evidence, era_from_markers, era_ranges, infer_engine_from_log,
    infer_version_from_log, refine_wildcard_version,
)

OBSERVED_KEYS = (
    "total_gpu_memory_gib", "requested_memory_gib", "weights_gib", "non_torch_gib", "activation_peak_gib",
    "kv_cache_gib", "num_gpu_blocks", "num_cpu_blocks", "kv_cache_tokens", "max_concurrency",
    "max_concurrency_tokens", "cuda_graph_gib", "cuda_graph_estimate_gib", "nvidia_smi_used_mib",
    "nvidia_smi_total_mib", "startup_failed",
)
SETTING_KEYS = (
    "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
    "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "dtype", "quantization",
    "kv_cache_dtype", "enforce_eager", "swap_space", "cpu_offload_gb", "enable_prefix_caching",
    "enable_chunked_prefill", "enable_lora", "speculative_config", "entrypoint",
    # not in SCHEMA's list but vLLM arguments the tool sizes
    "kv_cache_memory_bytes", "num_gpu_blocks_override", "enable_expert_parallel", "max_loras", "max_lora_rank",
)

# --- one printed figure ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Figure:
    key: str  # SCHEMA observed key, or an extra name (free_memory_on_startup_gib, kv_needed_gib, ...)
    value: object
    kind: str  # which line printed it ("weights line", "profiling summary", ...)
    priority: int  # 0 = the line made for this figure; higher = the same figure echoed elsewhere
    line: int
    source: str  # rank label: "rank 0", "TP1", "worker pid 2607784", ...
    rank0: bool | None  # True: rank 0 (driver, TP0, the engine core); None: cannot tell
    text: str  # the message, trimmed


@dataclass(frozen=True)
class SettingEvidence:
    value: object
    basis: str  # where it was read: "config line", "non-default args", "launch command", ...
    confidence: str  # "printed" (vLLM printed the value it used), "given" (what the user passed), ...
    line: int


@dataclass
class SourceInfo:
    label: str  # as printed in the prefix ("" for unprefixed lines)
    rank_label: str
    role: str  # "main", "engine", "worker", "api"
    rank0: bool | None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    rank: int | None = None
    pids: set = field(default_factory=set)
    ips: set = field(default_factory=set)


@dataclass
class Run:
    """One engine start inside the log."""

    index: int
    first_line: int = 0
    last_line: int = 0
    figures: list[Figure] = field(default_factory=list)
    settings: dict[str, SettingEvidence] = field(default_factory=dict)
    versions: list[tuple[str, str, int]] = field(default_factory=list)  # (version, basis, line)
    model: tuple[str, str, int] | None = None  # (name as printed, basis, line)
    failures: list[tuple[int, str]] = field(default_factory=list)
    successes: list[tuple[int, str]] = field(default_factory=list)
    sources: dict[str, SourceInfo] = field(default_factory=dict)
    markers: FormatMarkers = field(default_factory=FormatMarkers)
    gpu_names: list[tuple[str, str, int]] = field(default_factory=list)  # (name, basis, line)
    notes: list[tuple[int, str]] = field(default_factory=list)  # features the log shows (LoRA, MTP, ...)
    smi_gpus: list[dict] = field(default_factory=list)  # nvidia-smi rows quoted in the log
    smi_processes: list[dict] = field(default_factory=list)
    lines_matched: int = 0
    engine_hint: str | None = None  # "v0" / "v1" from 'Initializing a V0/V1 LLM engine'
    serving: object = None  # serving.ServingStats once a periodic stats line follows the startup
    world_size: int | None = None  # from the shared-memory broadcast's local_reader_ranks (driver + readers)
    _kinds: set = field(default_factory=set)

    # --- what the run printed, by SCHEMA key ---------------------------------------------------------------

    def has_figures(self) -> bool:
        return any(f.key in OBSERVED_KEYS and f.key != "startup_failed" for f in self.figures) or bool(
            self.smi_gpus or self.smi_processes)

    def figures_for(self, key: str) -> list[Figure]:
        return [figure for figure in self.figures if figure.key == key]

    def pick(self, key: str) -> Figure | None:
        """The figure SCHEMA's `observed` means: rank 0 when a rank-0 line printed it, the most direct
        line first; weights from several unknown ranks -> the largest (the stage that binds)."""
        found = self.figures_for(key)
        if not found:
            return None
        best = min(f.priority for f in found)
        found = [f for f in found if f.priority == best]
        rank0 = [f for f in found if f.rank0]
        if rank0:
            return rank0[0]
        if key == "weights_gib" and len({f.source for f in found}) > 1:
            return max(found, key=lambda f: f.value)
        return found[0]

    @property
    def startup_failed(self) -> bool | None:
        if self.failures:
            return True
        inferred = self._inferred_failure()
        if inferred:
            return True
        if self.successes:
            return False
        return None

    def _inferred_failure(self) -> str | None:
        """Failures the figures imply even where the error itself is not in the excerpt."""
        blocks = self.pick("num_gpu_blocks")
        cpu = self.pick("num_cpu_blocks")
        if blocks is not None and cpu is not None and blocks.value == 0:
            # V0 raise_if_cache_size_invalid: 'No available memory for the cache blocks'
            return "0 GPU blocks: V0 raises 'No available memory for the cache blocks'"
        kv = self.pick("kv_cache_gib")
        if kv is not None and kv.kind == "available KV line" and kv.value < 0:
            return "negative available KV cache memory: V1 raises 'No available memory for the cache blocks'"
        return None

    def observed(self) -> dict:
        """SCHEMA.md's `observed` object for this run (only what was printed, or what its errors imply)."""
        out = {}
        for key in OBSERVED_KEYS:
            if key == "startup_failed":
                continue
            figure = self.pick(key)
            if figure is not None:
                out[key] = figure.value
        smi = self.nvidia_smi()
        if smi.used_mib is not None:
            out["nvidia_smi_used_mib"] = smi.used_mib
        if smi.total_mib is not None:
            out["nvidia_smi_total_mib"] = smi.total_mib
        failed = self.startup_failed
        if failed is not None:
            out["startup_failed"] = failed
        return {key: out[key] for key in OBSERVED_KEYS if key in out}

    def nvidia_smi(self):
        from ....forensics.nvidia_smi import observed_smi

        return observed_smi(self.smi_gpus, self.smi_processes)

    def extras(self) -> dict:
        out = {}
        for figure in self.figures:
            if figure.key not in OBSERVED_KEYS and figure.key not in out:
                out[figure.key] = figure.value
        return out

    def per_rank(self) -> dict[str, dict]:
        """Every figure each rank printed (first value per key and rank)."""
        ranks: dict[str, dict] = {}
        for figure in self.figures:
            if figure.key in OBSERVED_KEYS:
                ranks.setdefault(figure.source, {}).setdefault(figure.key, figure.value)
        return ranks

    def setting(self, name: str):
        found = self.settings.get(name)
        return found.value if found else None

    @property
    def version(self) -> tuple[str, str, int] | None:
        """The release the log states (banner, config line, prose), most authoritative first."""
        order = {"config line": 0, "server banner": 1, "version banner": 1, "docker image tag": 2, "wheel name": 2,
                 "stated in text": 3}
        if not self.versions:
            return None
        return min(self.versions, key=lambda v: (order.get(v[1], 9), v[2]))

    def failure_message(self) -> str | None:
        if self.failures:
            return self.failures[0][1]
        return self._inferred_failure()


@dataclass
class ParsedLog:
    runs: list[Run]
    lines_read: int
    bytes_read: int
    lines_matched: int
    markers: FormatMarkers
    truncated_lines: int = 0

    @property
    def first(self) -> Run:
        for run in self.runs:
            if run.has_figures():
                return run
        return self.runs[0]


# --- line cleaning and record splitting ----------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# (?<!\s) and (?<=\S): a whitespace run is tried from its start only (linear time on long blank runs)
_REPEATED = re.compile(r"(?<!\s)\s*\[repeated \d{1,12}x across cluster\]")
_PREFIX = re.compile(r"\((?P<label>[A-Za-z][^()]*?)(?<=\S)\s+pid=(?P<pid>\d{1,12})(?:,\s*ip=(?P<ip>[^()\s]+))?\)")
_LEVEL_TIME = re.compile(r"\b(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?")
_HEADER = re.compile(
    r"\b(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+(?:\d\d-\d\d\s+\d\d:\d\d:\d\d(?:[.,]\d+)?\s+)?"
    r"(?:\[[\w./\\-]+\.py:\d+\]|[\w./\\-]+\.py:\d+\])\s?"
)
def _clean(line: str) -> str:
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "[repeated" in line:
        line = _REPEATED.sub("", line)
    return line.replace("\t", "    ").rstrip()


_LEVEL_WORDS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# the bulk of a long serving log: request and throughput lines never carry a startup figure
_NOISE = ("throughput:", 'HTTP/1.1"', "Received request", "Finished request", "Added request", "Aborted request",
          "prefix cache hit rate", "Prefix cache hit rate")


def _split_records(line: str) -> list[str]:
    """Several log records glued on one line (Ray's aggregated output, excerpts) -> one string each."""
    if line.count("pid=") <= 1:
        levels = [line.find(word) for word in _LEVEL_WORDS if word in line]
        if not levels or (len(levels) == 1 and sum(line.count(w) for w in _LEVEL_WORDS) == 1
                          and not any(ch.isdigit() for ch in _PREFIX.sub("", line[:levels[0]]))):
            return [line]
    prefixes = list(_PREFIX.finditer(line))
    cuts = [m.start() for m in prefixes]
    prefix_ends = [m.end() for m in prefixes]
    for match in _LEVEL_TIME.finditer(line):
        start = match.start()
        # a level right after a prefix (maybe with "[Stage-1]" between) belongs to that prefix
        if any(0 <= start - end <= 40 and re.fullmatch(r"\s*(?:\[[^\]]*\]\s*)*", line[end:start]) for end in prefix_ends):
            continue
        cuts.append(start)
    cuts = sorted(set(c for c in cuts if c > 0))
    if not cuts:
        return [line]
    pieces, last = [], 0
    for cut in cuts:
        if line[last:cut].strip():
            pieces.append(line[last:cut])
        last = cut
    pieces.append(line[last:])
    return pieces


@dataclass
class _Record:
    text: str  # the whole record, cleaned
    message: str  # after the level / file:line header (or the whole record)
    level: str | None
    prefix: re.Match | None


def _record(text: str) -> _Record:
    prefix = _PREFIX.search(text)
    header = _HEADER.search(text)
    if header is not None:
        message = text[header.end():]
        level = header.group("level")
    else:
        level_time = _LEVEL_TIME.search(text)
        level = level_time.group("level") if level_time else None
        message = text[prefix.end():] if prefix else (text[level_time.end():] if level_time else text)
    if prefix is not None and header is not None and prefix.start() > header.start():
        prefix = None  # a "(... pid=...)" inside the message is not this record's prefix
    return _Record(text, message.strip(), level, prefix)


def _source_of(record: _Record) -> SourceInfo:
    if record.prefix is None:
        return SourceInfo("", "rank 0", "main", True)
    label = record.prefix.group("label").strip()
    pid = record.prefix.group("pid")
    ip = record.prefix.group("ip")
    tp = _int(re.search(r"TP(\d{1,9})", label))
    pp = _int(re.search(r"PP(\d{1,9})", label))
    dp = _int(re.search(r"DP(\d{1,9})|EngineCore_(\d{1,9})", label))
    rank = _int(re.search(r"rank[= ](\d{1,9})", label))
    lowered = label.lower()
    if lowered.startswith("apiserver") or lowered.startswith("api_server"):
        return SourceInfo(label, "rank 0", "api", True, pids={pid})
    if lowered.startswith("enginecore"):
        if dp:
            return SourceInfo(label, f"DP{dp}", "engine", False, dp=dp, pids={pid})
        return SourceInfo(label, "rank 0", "engine", True, dp=dp, pids={pid})
    if tp is not None or pp is not None:
        parts = []
        if dp:
            parts.append(f"DP{dp}")
        if pp is not None:
            parts.append(f"PP{pp}")
        parts.append(f"TP{tp if tp is not None else 0}")
        is0 = not tp and not pp and not dp
        name = "rank 0" if is0 else " ".join(parts)
        return SourceInfo(label, name, "worker", is0, tp=tp, pp=pp, dp=dp, pids={pid})
    if rank is not None:
        return SourceInfo(label, "rank 0" if rank == 0 else f"rank {rank}", "worker", rank == 0, rank=rank, pids={pid})
    where = f" ({ip})" if ip else ""
    kind = "Ray worker" if "ray" in lowered else "worker"
    return SourceInfo(label, f"{kind} pid {pid}{where}", "worker", None, pids={pid}, ips={ip} if ip else set())


def _int(match: re.Match | None) -> int | None:
    if match is None:
        return None
    for group in match.groups():
        if group is not None:
            return int(group)
    return None


# --- figure patterns -----------------------------------------------------------------------------------------

# Numbers start where a digit run starts ((?<!\d): tried once per run, not at every digit) and have bounded
# lengths; a longer run is no figure at all
_N = r"(?<!\d)(-?\d{1,15}(?:\.\d{1,20})?)"
_COUNT = r"(?<!\d)(\d{1,15})(?![\d.])"
_TOKENS = r"(?<!\d)(\d{1,3}(?:,\d{3}){1,5}|\d{1,15})(?![\d.])"


def _float(text: str) -> float:
    return float(text)


def _tokens(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass(frozen=True)
class Pattern:
    """One regex the reader runs, the `_on_<name>` handler that takes its match, and the literals a line needs
    (any of them) before the regex is tried: a substring test is far cheaper than a regex search."""

    name: str
    regex: re.Pattern
    keywords: tuple[str, ...]


def _p(name: str, regex: str, *keywords: str) -> Pattern:
    return Pattern(name, re.compile(regex), keywords)


# Order matters only within one record. The formats `explain` prints (formats.py) name the patterns that read
# them back (LogFormat.read_by); the rest are lines only read (banners, settings, errors).
# fmt: off
PATTERNS: tuple[Pattern, ...] = (
    # identity first: a banner or config line after figures starts the next run before its figures land
    _p("config_line", r"Initializing (?:an?|a V[01]) LLM engine(?: \(v(?P<version>[^)\s]+)\))? with config:?(?P<body>.*)",
       "LLM engine"),
    _p("non_default_args", r"non-default args: (?P<body>\{.*)",
       "non-default args"),
    _p("server_banner", r"vLLM(?: API)? server version v?(?P<version>\d+\.\d+[\w.+-]*)(?:, serving model (?P<model>\S+))?",
       "server version"),
    _p("logo_version", r"█\s+version\s+v?(?P<version>\d+\.\d+[\w.+-]*)(?:.*?\bmodel\s+(?P<model>\S+))?",
       "version"),
    _p("logo_model", r"█\s+model\s+(?P<model>\S+)",
       "█"),
    _p("logo_version", r"^version\s+v?(?P<version>\d+\.\d+[\w.+-]*)(?:.*?\bmodel\s+(?P<model>\S+))?",
       "version"),
    _p("stated_version", r"\bvLLM(?: [Vv]ersion)?:?\s+v?(?P<version>\d+\.\d+(?:\.\d+)?(?:[.\w+-]*\w)?)",
       "vLLM"),
    _p("docker_version", r"vllm-openai:v(?P<version>\d+\.\d+(?:\.\d+)?(?:[.\w+-]*\w)?)",
       "vllm-openai:"),
    _p("wheel_version", r"\bvllm-(?P<version>\d+\.\d+\.\d+[\w.+]*?)(?:\.cu\d+)?-cp\d",
       "vllm-"),
    _p("launch_command", r"(?:vllm serve|python3? -m vllm\.entrypoints\.[\w.]+|-m vllm\.entrypoints\.[\w.]+)\s.*",
       "vllm serve", "-m vllm"),
    # weights
    _p("weights_line", r"model weights took " + _N + r" ?(GB|GiB|MB|MiB)\b",
       "weights took"),
    _p("model_loading", r"Model loading took:?\**\s*" + _N + r" ?(GiB|GB)(?! for)(?P<rest>.*)",
       "loading took"),
    _p("weights_summary", r"model weights take\s+" + _N + r"\s*GiB",
       "weights take"),
    # V0 0.6.4.x
    _p("profiling_results", r"Memory profiling results:?(?P<body>.*)",
       "profiling results"),
    # V0 0.6.5-0.10 (three lines, or the one-per-line table of the #10511 dev build)
    _p("total_gpu_memory", r"total_gpu_memory\s*(?:[=:(]\s*|\s)" + _N + r"\s*GiB",
       "total_gpu_memory"),
    _p("utilization_printed", r"gpu_memory_utilization\s*(?:\(\s*|=\s*|\s+)" + _N + r"\b",
       "gpu_memory_utilization"),
    _p("requested_v0", r"the current vLLM instance can use(?:.*?=\s*|\s+)" + _N + r"\s*GiB",
       "instance can use"),
    _p("non_torch_summary", r"non_torch_memory(?:\s+takes)?\s+" + _N + r"\s*GiB",
       "non_torch_memory"),
    _p("activation_summary", r"PyTorch activation peak memory(?:\s+takes)?\s+" + _N + r"\s*GiB",
       "activation peak memory"),
    _p("kv_summary", r"(?:KV Cache is|available_kv_cache_memory)\s+" + _N + r"\s*GiB",
       "KV Cache is", "available_kv_cache_memory"),
    _p("profiling_takes", r"Memory profiling takes " + _N + r" seconds",
       "profiling takes"),
    # V1 DEBUG profile summary (0.9.1-0.26; 0.27+ 'total consumed')
    _p("debug_non_kv", r"Total non KV cache memory: " + _N + r"\s*GiB",
       "non KV cache memory"),
    _p("debug_activation", r"torch peak memory increase: " + _N + r"\s*GiB",
       "peak memory increase"),
    _p("debug_non_torch", r"non-torch forward increase memory: " + _N + r"\s*GiB",
       "forward increase"),
    _p("debug_consumed", r"total consumed \(from mem_get_info\): " + _N + r"\s*GiB",
       "total consumed"),
    _p("debug_weights", r"weights memory: " + _N + r"\s*GiB",
       "weights memory:"),
    _p("debug_requested", r"Initial free memory:? " + _N + r" ?GiB[;,] Requested memory: " + _N + r" \(util\), " + _N + r" ?GiB",
       "Requested memory"),
    _p("kv_memory_bytes", r"Initial free memory " + _N + r" ?GiB, reserved " + _N + r" ?GiB memory for KV Cache",
       "memory for KV Cache"),
    # V1 budget
    _p("available_kv", r"Available KV cache memory:?\**\s*" + _N + r" ?GiB",
       "Available KV cache memory"),
    _p("free_on_startup", r"Free memory on device(?: [\w:]+)?:?\**\s*\(?" + _N + r"/" + _N + r" GiB\)? on startup(?P<rest>.*)",
       "Free memory on device"),
    _p("desired_utilization", r"Desired GPU memory utilization is \(" + _N + r", " + _N + r" GiB\)",
       "Desired GPU memory"),
    _p("suggest_weights", r"Actual usage is " + _N + r" GiB for weight\b",
       "GiB for "),
    _p("suggest_consumed", r"" + _N + r" GiB for consumed memory",
       "GiB for "),
    _p("suggest_activation", r"" + _N + r" GiB for peak activation",
       "GiB for "),
    _p("suggest_non_torch", r"" + _N + r" GiB for non-torch memory",
       "GiB for "),
    _p("suggest_graphs", r"" + _N + r" GiB for CUDAGraph memory",
       "GiB for "),
    _p("kv_in_use", r"Current kv cache memory in use is " + _N + r" ?(GiB|bytes)",
       "memory in use"),
    _p("suggest_fit", r"--kv-cache-memory=(\d{1,15})`?(?: \(" + _N + r" GiB\))? to fit into requested memory",
       "--kv-cache-memory="),
    _p("suggest_full", r"--kv-cache-memory=(\d{1,15})`?(?: \(" + _N + r" GiB\))? to fully utilize",
       "--kv-cache-memory="),
    # blocks, tokens, concurrency
    _p("blocks", r"(?:#\s*)?(?:GPU|CUDA|cuda|gpu) blocks: " + _COUNT + r"(?:, # CPU blocks: " + _COUNT + r")?",
       "blocks: "),
    _p("blocks_override", r"Overriding num_gpu_blocks=(\d{1,15}) with num_gpu_blocks_override=(\d{1,15})",
       "num_gpu_blocks_override"),
    _p("kv_tokens", r"GPU KV cache size: " + _TOKENS + r" tokens",
       "KV cache size"),
    _p("concurrency", r"Maximum concurrency for " + _TOKENS + r" tokens per request: " + _N + r"x",
       "Maximum concurrency"),
    # CUDA graphs
    _p("graph_capture", r"Graph capturing finished in " + _N + r" secs?(?:, took " + _N + r" GiB)?",
       "Graph capturing finished"),
    _p("graph_pool", r"CUDA graph pool memory: " + _N + r" GiB \(actual\), " + _N + r" GiB \(estimated\)",
       "graph pool memory"),
    _p("graph_estimate", r"Estimated CUDA graph memory: " + _N + r" GiB total",
       "Estimated CUDA graph"),
    _p("graph_hint", r"--gpu-memory-utilization=" + _N + r" is equivalent to --gpu-memory-utilization=" + _N,
       "is equivalent to"),
    _p("graph_hint_old", r"increase --gpu-memory-utilization from " + _N + r" to " + _N,
       "increase --gpu-memory-utilization"),
    _p("graph_hint_018", r"In v0\.19, CUDA graph memory profiling will be enabled",
       "In v0.19"),
    _p("graph_hint_021", r"default since v0\.21\.0",
       "default since v0.21"),
    # errors
    _p("no_kv_error", r"No available memory for the cache blocks",
       "No available memory"),
    _p("v0_fit_error", r"max seq len \((\d{1,15})\) is larger than the maximum number of tokens that can be stored in KV cache " r"\((\d{1,15})\)",
       "max seq len"),
    _p("v1_fit_error", r"To serve at least one request with the models?'s? max seq len \((\d{1,15})\),? \(?" + _N + r" ?(GiB|GB) KV cache is needed, which is larger than the available KV cache memory \(" + _N + r" ?(GiB|GB)\)",
       "max seq len"),
    _p("estimated_max_len", r"estimated maximum model length is (\d{1,15})",
       "estimated maximum model length"),
    _p("oom", r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory",
       "out of memory", "OutOfMemoryError"),
    _p("oom_allocate", r"Tried to allocate " + _N + r" ?(GiB|MiB)",
       "Tried to allocate"),
    _p("failure", r"EngineCore failed to start|Engine core initialization failed|EngineCore hit an exception|" r"WorkerProc hit an exception|Failed to load model|Traceback \(most recent call last\)",
       "EngineCore", "WorkerProc", "Failed to load", "Engine core", "Traceback"),
    _p("success", r"init engine \(profile, create kv cache, warmup model\) took|Application startup complete|" r"Starting vLLM API server|Uvicorn running on|Available routes are",
       "init engine", "startup complete", "Starting vLLM API", "Uvicorn running", "Available routes"),
    _p("starting_model", r"Starting to load model (?P<model>\S+?)(?:\.\.\.)?$",
       "Starting to load model"),
    _p("max_model_len_line", r"Using max model len (\d{1,15})",
       "Using max model len"),
    _p("chunked_prefill", r"Chunked prefill is enabled with max_num_batched_tokens=(\d{1,15})",
       "Chunked prefill is enabled"),
    _p("block_size_line", r"(?:Forcing kv cache block size to|Setting attention block size to|Setting kv cache block size to) " r"(\d{1,15})",
       "block size to"),
    _p("device_name", r"device_name=(NVIDIA_[\w-]+?)(?:,|\.json|$)",
       "device_name="),
    _p("reader_ranks", r"local_reader_ranks=\[([\d, ]+)\]",
       "local_reader_ranks="),
    _p("gpu_type", r"GPU type:\s*(.+?)\s*$",
       "GPU type"),
    _p("lora_on", r"\benable_lora=True|Using PunicaWrapper",
       "enable_lora=True", "PunicaWrapper"),
    _p("max_loras", r"\bmax_loras=(\d{1,15})",
       "max_loras="),
    _p("max_lora_rank", r"\bmax_lora_rank=(\d{1,15})",
       "max_lora_rank="),
    _p("speculative_on", r"Detected MTP model|Loading drafter model|speculative_config=(?!None)\S",
       "MTP model", "drafter model", "speculative_config="),
    _p("encoder_cache", r"Encoder cache will be initialized with a budget of (\d{1,15}) tokens",
       "Encoder cache"),
    _p("padding_layers", r"Add (\d{1,15}) padding layers",
       "padding layers"),
    _p("backend", r"Using (\S+) attention backend|Using (\S+) backend\b",
       "backend"),
    _p("fp8_kv", r"Using FP8 KV cache|fp8_ds_mla KV cache format",
       "FP8 KV cache", "fp8_ds_mla"),
)
# fmt: on



_ERROR_WORDS = re.compile(r"error|exception|fail|out of memory", re.IGNORECASE)
_EXCEPTION_LINE = re.compile(r"(?:\w*\.)*[A-Z]\w*(?:Error|Exception):\s")  # (\w*\.)*: one way to split dots

_MATCHERS = [(p.regex, p.name, p.keywords) for p in PATTERNS]
# a line without any of these carries nothing the parser reads
_GATE_WORDS = tuple(dict.fromkeys(
    ("GiB", " GB", "blocks", "took", "Error", "ERROR", "rror:", "xception", "MiB", "|", "memory.")
    + tuple(word for p in PATTERNS for word in p.keywords)
    + ("Processes:", "NVIDIA", "Tesla", "Quadro")))


def _any_of(words) -> re.Pattern:
    """A regex that finds whether any of `words` occurs, as a trie (one branch per next character), so each
    position tries a few characters: 2-3x cheaper than a Python loop of substring tests over ~100 words."""
    trie: dict = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict) -> str:
        if "" in node:  # a word ends here: enough to say one occurs
            return ""
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    return re.compile(build(trie))


_GATE = _any_of(_GATE_WORDS)
_ALL_KEYWORDS = tuple(dict.fromkeys(word for p in PATTERNS for word in p.keywords))
# keyword -> the indices in _MATCHERS of the patterns it admits, in _MATCHERS order
_MATCHERS_OF: dict[str, tuple[int, ...]] = {
    word: tuple(index for index, (_, _, words) in enumerate(_MATCHERS) if word in words) for word in _ALL_KEYWORDS}


class _RunBuilder:
    """Feeds records into the current run and starts a new run when the log restarts."""

    # figure kinds printed once per engine start (per rank): seeing one again means a new start
    RESTART_KINDS = {"weights line", "blocks line", "config line", "non-default args", "version", "profiling summary",
                     "budget line", "available KV line", "startup suggestion", "launch command"}
    # kinds that only restart a run that already printed memory figures
    IDENTITY_KINDS = {"config line", "non-default args", "version", "launch command"}

    def __init__(self, smi_scanner) -> None:
        self.runs = [Run(index=0)]
        self.line_no = 0
        self.smi = smi_scanner

    @property
    def run(self) -> Run:
        return self.runs[-1]

    def _kind(self, kind: str, source: SourceInfo) -> None:
        """A line printed once per engine start: seen again for the same rank, or an identity line (banner,
        config, arguments, command) after memory figures, means the engine started again."""
        run = self.run
        key = (kind, source.rank_label)
        if kind in self.IDENTITY_KINDS:
            restart = run.has_figures()
        else:
            restart = kind in self.RESTART_KINDS and key in run._kinds
        if restart:
            self.runs.append(Run(index=len(self.runs), first_line=self.line_no))
            run = self.run
        run._kinds.add(key)

    def _touch(self) -> None:
        run = self.run
        if not run.first_line:
            run.first_line = self.line_no
        run.last_line = self.line_no

    def figure(self, key, value, kind, priority, source: SourceInfo, text: str) -> None:
        self._touch()
        self.run.figures.append(Figure(key, value, kind, priority, self.line_no, source.rank_label, source.rank0,
                                       text[:300]))

    def setting(self, name, value, basis, confidence) -> None:
        self._touch()
        existing = self.run.settings.get(name)
        rank = {"printed": 0, "given": 1, "launch command": 2, "implied": 3}
        if existing is None or rank.get(confidence, 9) < rank.get(existing.confidence, 9):
            self.run.settings[name] = SettingEvidence(value, basis, confidence, self.line_no)

    def version(self, text: str, basis: str) -> None:
        self._touch()
        self.run.versions.append((text, basis, self.line_no))

    def model(self, name: str, basis: str) -> None:
        name = name.strip().strip("'\"`,")
        if name and (self.run.model is None or basis in ("config line", "non-default args")):
            self.run.model = (name, basis, self.line_no)


class LogParser:
    """Feed lines (str), then call result()."""

    def __init__(self) -> None:
        from ....forensics.nvidia_smi import LineScanner

        self._builder = _RunBuilder(LineScanner())
        self.lines_read = 0
        self.bytes_read = 0
        self.lines_matched = 0
        self.truncated_lines = 0
        self.markers = FormatMarkers()
        self._command: str | None = None  # a launch command continued with "\"

    def feed(self, raw: str) -> None:
        self.lines_read += 1
        if len(raw) > MAX_LINE_CHARS:  # LineReader has cut these already; parse_text / parse_lines have not
            raw = raw[:MAX_LINE_CHARS]
            self.truncated_lines += 1
        self._builder.line_no = self.lines_read
        line = _clean(raw)
        if self._command is not None:
            if line[:1].isspace() or line.lstrip().startswith("-"):  # a continued command line
                self._command += " " + line.strip().rstrip("\\")
                if line.rstrip().endswith("\\"):
                    return
                line = ""
            command, self._command = self._command, None
            self._launch(command, SourceInfo("", "rank 0", "main", True))
            if not line:
                return
        if not line:
            return
        if "usage:" in line or "preempted by" in line or "#retracted" in line:
            self._serving(line)  # the periodic stats lines, which the filter below drops as noise
        for noise in _NOISE:
            if noise in line:
                return
        if _GATE.search(line) is None:
            return
        matched = False
        smi = self._builder.smi.feed(line)
        if smi:
            self._smi(smi)
            matched = True
        for piece in _split_records(line):
            record = _record(piece)
            self.markers.feed(record.text)
            self._builder.run.markers.feed(record.text)
            if self._handle(record):
                matched = True
        if matched:
            self.lines_matched += 1
            self._builder.run.lines_matched += 1
            if not self._builder.run.first_line:
                self._builder.run.first_line = self.lines_read
            self._builder.run.last_line = self.lines_read

    def _serving(self, line: str) -> None:
        run = self._builder.run
        if run.serving is not None:
            run.serving.feed(line, self.lines_read)
            return
        stats = ServingStats()
        if stats.feed(line, self.lines_read):
            run.serving = stats

    def _smi(self, found: list[dict]) -> None:
        run = self._builder.run
        for item in found:
            if item["type"] == "gpu":
                run.smi_gpus.append(dict(item, line=self.lines_read))
            elif item["type"] == "process":
                run.smi_processes.append(dict(item, line=self.lines_read))

    # --- one record ----------------------------------------------------------------------------------------

    def _handle(self, record: _Record) -> bool:
        message = record.message
        source = None
        builder = self._builder
        hit = False
        found = [word for word in _ALL_KEYWORDS if word in message]  # then only the patterns these admit
        if not found:
            candidates = ()
        elif len(found) == 1:
            candidates = _MATCHERS_OF[found[0]]
        else:
            candidates = sorted({index for word in found for index in _MATCHERS_OF[word]})
        for index in candidates:
            pattern, handler, _ = _MATCHERS[index]
            match = pattern.search(message)
            if match is None:
                continue
            if source is None:
                source = _source_of(record)
            if getattr(self, "_on_" + handler)(match, source, message, record) is not False:
                hit = True
        if not hit and record.level in ("ERROR", "CRITICAL") and _ERROR_WORDS.search(message):
            builder.run.failures.append((self.lines_read, message[:300]))
            hit = True
        elif ("Error" in message or "Exception" in message) and _EXCEPTION_LINE.match(message) \
                and not builder.run.failures:
            builder.run.failures.append((self.lines_read, message[:300]))
            hit = True
        if hit:
            if source is None:
                source = _source_of(record)
            info = builder.run.sources.get(source.rank_label + "|" + source.label)
            if info is None:
                builder.run.sources[source.rank_label + "|" + source.label] = source
            else:
                info.pids |= source.pids
                info.ips |= source.ips
        return hit

    def _fig(self, key, value, kind, priority, source, message) -> None:
        self._builder.figure(key, value, kind, priority, source, message)

    # weights
    def _on_weights_line(self, m, source, message, record):
        value = _float(m.group(1))
        if m.group(2) in ("MB", "MiB"):
            value = value / 1024
        self._builder._kind("weights line", source)
        self._fig("weights_gib", value, "weights line", 0, source, message)

    def _on_model_loading(self, m, source, message, record):
        self._builder._kind("weights line", source)
        self._fig("weights_gib", _float(m.group(1)), "weights line", 0, source, message)

    def _on_weights_summary(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "profiling summary", 1, source, message)

    def _on_profiling_results(self, m, source, message, record):
        body = m.group("body")
        values = dict((k, v) for k, v in re.findall(r"(?<!\w)(\w+)=" + _N, body))
        if not values:
            return False
        self._builder._kind("profiling summary", source)
        names = {"initial_memory_usage": "initial_memory_usage_gib", "peak_torch_memory": "peak_torch_memory_gib",
                 "memory_usage_post_profile": "memory_usage_post_profile_gib"}
        for name, value in values.items():
            if name == "non_torch_memory":
                self._fig("non_torch_gib", _float(value), "profiling summary", 0, source, message)
            elif name == "kv_cache_size":
                self._fig("kv_cache_gib", _float(value), "profiling summary", 0, source, message)
            elif name in names:
                self._fig(names[name], _float(value), "profiling summary", 0, source, message)
        return True  # total and utilization come from their own patterns

    def _on_total_gpu_memory(self, m, source, message, record):
        self._fig("total_gpu_memory_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_utilization_printed(self, m, source, message, record):
        value = _float(m.group(1))
        if not 0 < value <= 1:
            return False
        self._builder.setting("gpu_memory_utilization", value, "profiling line", "printed")

    def _on_requested_v0(self, m, source, message, record):
        self._builder._kind("budget line", source)
        self._fig("requested_memory_gib", _float(m.group(1)), "budget line", 0, source, message)

    def _on_non_torch_summary(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_activation_summary(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_kv_summary(self, m, source, message, record):
        self._builder._kind("profiling summary", source)
        self._fig("kv_cache_gib", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_profiling_takes(self, m, source, message, record):
        self._fig("profiling_seconds", _float(m.group(1)), "profiling summary", 0, source, message)

    def _on_debug_non_kv(self, m, source, message, record):
        self._fig("non_kv_cache_gib", _float(m.group(1)), "debug profile", 0, source, message)

    def _on_debug_activation(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_non_torch(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_consumed(self, m, source, message, record):
        self._fig("consumed_gib", _float(m.group(1)), "debug profile", 1, source, message)

    def _on_debug_weights(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "debug profile", 3, source, message)

    def _on_debug_requested(self, m, source, message, record):
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "debug profile", 1, source, message)
        self._builder.setting("gpu_memory_utilization", _float(m.group(2)), "debug profile line", "printed")
        self._fig("requested_memory_gib", _float(m.group(3)), "debug profile", 2, source, message)

    def _on_kv_memory_bytes(self, m, source, message, record):
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "available KV line", 1, source, message)
        self._fig("kv_cache_gib", _float(m.group(2)), "available KV line", 1, source, message)
        self._builder.setting("kv_cache_memory_bytes", int(round(_float(m.group(2)) * 2**30)), "KV reservation line",
                              "printed")

    def _on_available_kv(self, m, source, message, record):
        self._builder._kind("available KV line", source)
        self._fig("kv_cache_gib", _float(m.group(1)), "available KV line", 0, source, message)

    def _on_free_on_startup(self, m, source, message, record):
        rest = m.group("rest")
        self._fig("free_memory_on_startup_gib", _float(m.group(1)), "startup suggestion", 0, source, message)
        self._fig("total_gpu_memory_gib", _float(m.group(2)), "startup suggestion", 1, source, message)
        failed = re.search(r"is less than (?:desired GPU memory utilization|the engine's budget.*?) \(" + _N + ", " + _N
                           + r" GiB\)", rest)
        if failed:
            self._builder.setting("gpu_memory_utilization", _float(failed.group(1)), "startup check", "printed")
            self._fig("requested_memory_gib", _float(failed.group(2)), "startup check", 1, source, message)
            self._builder.run.failures.append((self.lines_read, message[:300]))
        else:
            self._builder._kind("startup suggestion", source)

    def _on_desired_utilization(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "startup suggestion line", "printed")
        self._fig("requested_memory_gib", _float(m.group(2)), "startup suggestion", 1, source, message)

    def _on_suggest_weights(self, m, source, message, record):
        self._fig("weights_gib", _float(m.group(1)), "startup suggestion", 2, source, message)

    def _on_suggest_consumed(self, m, source, message, record):
        self._fig("consumed_gib", _float(m.group(1)), "startup suggestion", 0, source, message)

    def _on_suggest_activation(self, m, source, message, record):
        self._fig("activation_peak_gib", _float(m.group(1)), "startup suggestion", 1, source, message)

    def _on_suggest_non_torch(self, m, source, message, record):
        self._fig("non_torch_gib", _float(m.group(1)), "startup suggestion", 1, source, message)

    def _on_suggest_graphs(self, m, source, message, record):
        self._fig("cuda_graph_gib", _float(m.group(1)), "startup suggestion", 2, source, message)

    def _on_kv_in_use(self, m, source, message, record):
        value = _float(m.group(1))
        if m.group(2) == "bytes":
            value = value / 2**30
        self._fig("kv_cache_gib", value, "startup suggestion", 1, source, message)

    def _on_suggest_fit(self, m, source, message, record):
        self._fig("suggested_kv_cache_memory_fit_bytes", int(m.group(1)), "startup suggestion", 0, source, message)

    def _on_suggest_full(self, m, source, message, record):
        self._fig("suggested_kv_cache_memory_full_bytes", int(m.group(1)), "startup suggestion", 0, source, message)

    # blocks, tokens, concurrency
    def _on_blocks(self, m, source, message, record):
        self._builder._kind("blocks line", source)
        self._fig("num_gpu_blocks", int(m.group(1)), "blocks line", 0, source, message)
        if m.group(2) is not None:
            self._fig("num_cpu_blocks", int(m.group(2)), "blocks line", 0, source, message)

    def _on_blocks_override(self, m, source, message, record):
        self._builder.setting("num_gpu_blocks_override", int(m.group(2)), "override line", "printed")

    def _on_kv_tokens(self, m, source, message, record):
        self._fig("kv_cache_tokens", _tokens(m.group(1)), "KV size line", 0, source, message)

    def _on_concurrency(self, m, source, message, record):
        tokens = _tokens(m.group(1))
        self._fig("max_concurrency_tokens", tokens, "concurrency line", 0, source, message)
        self._fig("max_concurrency", _float(m.group(2)), "concurrency line", 0, source, message)
        self._builder.setting("max_model_len", tokens, "concurrency line", "printed")

    # graphs
    def _on_graph_capture(self, m, source, message, record):
        if m.group(2) is not None:
            self._fig("cuda_graph_gib", _float(m.group(2)), "graph capture line", 0, source, message)
        self._builder.run.successes.append((self.lines_read, "CUDA graphs captured"))

    def _on_graph_pool(self, m, source, message, record):
        self._fig("cuda_graph_gib", _float(m.group(1)), "graph pool line", 1, source, message)
        self._fig("cuda_graph_estimate_gib", _float(m.group(2)), "graph pool line", 1, source, message)

    def _on_graph_estimate(self, m, source, message, record):
        self._fig("cuda_graph_estimate_gib", _float(m.group(1)), "graph estimate line", 0, source, message)

    def _on_graph_hint(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "CUDA-graph profiling hint", "printed")
        self._fig("equivalent_utilization_without_graph_profiling", _float(m.group(2)), "graph hint", 0, source,
                  message)

    def _on_graph_hint_old(self, m, source, message, record):
        self._builder.setting("gpu_memory_utilization", _float(m.group(1)), "CUDA-graph profiling hint", "printed")

    def _on_graph_hint_018(self, m, source, message, record):
        self._builder.version("0.18", "CUDA-graph hint 'In v0.19, ... will be enabled' (0.18.x)")

    def _on_graph_hint_021(self, m, source, message, record):
        self._builder.version("0.21", "CUDA-graph hint 'default since v0.21.0' (0.21+)")

    # errors
    def _on_no_kv_error(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_v0_fit_error(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "KV-capacity error", "printed")
        self._fig("kv_cache_tokens", int(m.group(2)), "KV-capacity error", 1, source, message)
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_v1_fit_error(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "KV-capacity error", "printed")
        self._fig("kv_needed_gib", _float(m.group(2)), "KV-capacity error", 0, source, message)
        self._fig("kv_cache_gib", _float(m.group(4)), "KV-capacity error", 2, source, message)
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_estimated_max_len(self, m, source, message, record):
        self._fig("estimated_max_model_len", int(m.group(1)), "KV-capacity error", 0, source, message)

    def _on_oom(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_oom_allocate(self, m, source, message, record):
        value = _float(m.group(1)) / (1024 if m.group(2) == "MiB" else 1)
        self._fig("oom_tried_to_allocate_gib", value, "CUDA OOM", 0, source, message)

    def _on_failure(self, m, source, message, record):
        self._builder.run.failures.append((self.lines_read, message[:300]))

    def _on_success(self, m, source, message, record):
        self._builder.run.successes.append((self.lines_read, m.group(0)))

    # settings and identity
    def _on_config_line(self, m, source, message, record):
        builder = self._builder
        builder._kind("config line", source)
        if m.group("version"):
            builder.version(m.group("version"), "config line")
        body = m.group("body") or ""
        model = re.search(r"(?:^|[\s,(])model='([^']*)'", body)
        if model:
            builder.model(model.group(1), "config line")
        for name, value in _config_settings(body).items():
            builder.setting(name, value, "config line", "printed")
        if "cudagraph_mode': <CUDAGraphMode.NONE" in body or '"cudagraph_mode":0' in body:
            builder.run.notes.append((self.lines_read, "CUDA graphs off (cudagraph_mode NONE)"))
        engine = re.search(r"a (V[01]) LLM engine", message)
        if engine:
            builder.run.engine_hint = engine.group(1).lower()

    def _on_non_default_args(self, m, source, message, record):
        builder = self._builder
        builder._kind("non-default args", source)
        args = _python_dict_items(m.group("body"))
        if "model_tag" in args:
            builder.setting("entrypoint", "serve", "non-default args (model_tag: the `vllm serve` CLI)", "given")
        model = args.get("model_tag") or args.get("model")
        if isinstance(model, str):
            builder.model(model, "non-default args")
        for name, value in args.items():
            if name in SETTING_KEYS:
                if name == "speculative_config" and not value:
                    continue
                builder.setting(name, value, "non-default args", "given")

    def _on_server_banner(self, m, source, message, record):
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "server banner")
        if m.group("model"):
            self._builder.model(m.group("model"), "server banner")
        if "API server" in m.group(0) or source.role == "api":
            self._builder.setting("entrypoint", "serve", "API server banner", "implied")

    def _on_logo_version(self, m, source, message, record):
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "version banner")
        if m.groupdict().get("model"):
            self._builder.model(m.group("model"), "version banner")
        self._builder.setting("entrypoint", "serve", "API server banner", "implied")

    def _on_logo_model(self, m, source, message, record):
        self._builder.model(m.group("model"), "version banner")

    def _on_stated_version(self, m, source, message, record):
        if "server version" in message or re.search(r"█|^version", message):
            return False
        self._builder._kind("version", source)
        self._builder.version(m.group("version"), "stated in text")

    def _on_docker_version(self, m, source, message, record):
        self._builder.version(m.group("version"), "docker image tag")

    def _on_wheel_version(self, m, source, message, record):
        self._builder.version(m.group("version"), "wheel name")

    def _on_starting_model(self, m, source, message, record):
        self._builder.model(m.group("model"), "load line")

    def _on_max_model_len_line(self, m, source, message, record):
        self._builder.setting("max_model_len", int(m.group(1)), "'Using max model len' line", "printed")

    def _on_chunked_prefill(self, m, source, message, record):
        self._builder.setting("max_num_batched_tokens", int(m.group(1)), "chunked-prefill line", "printed")
        self._builder.setting("enable_chunked_prefill", True, "chunked-prefill line", "printed")

    def _on_block_size_line(self, m, source, message, record):
        self._builder.setting("block_size", int(m.group(1)), "block-size line", "printed")

    def _on_device_name(self, m, source, message, record):
        self._builder.run.gpu_names.append((m.group(1).replace("_", " "), "fused-MoE config file name", self.lines_read))

    def _on_reader_ranks(self, m, source, message, record):
        ranks = [int(x) for x in re.findall(r"\d+", m.group(1)) if len(x) <= 6]
        self._builder.run.world_size = max(ranks) + 1 if ranks else None

    def _on_gpu_type(self, m, source, message, record):
        self._builder.run.gpu_names.append((m.group(1), "'GPU type' line", self.lines_read))

    def _on_lora_on(self, m, source, message, record):
        self._builder.setting("enable_lora", True, "LoRA line", "printed")

    def _on_max_loras(self, m, source, message, record):
        self._builder.setting("max_loras", int(m.group(1)), "LoRA config", "printed")

    def _on_max_lora_rank(self, m, source, message, record):
        self._builder.setting("max_lora_rank", int(m.group(1)), "LoRA config", "printed")

    def _on_speculative_on(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, "speculative decoding (a draft model / MTP head is loaded)"))

    def _on_encoder_cache(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, f"multimodal encoder cache budget {m.group(1)} tokens"))

    def _on_padding_layers(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, f"hybrid KV grouping ({m.group(1)} padding layers)"))

    def _on_backend(self, m, source, message, record):
        name = m.group(1) or m.group(2)
        if name and name not in ("default",):
            self._builder.run.notes.append((self.lines_read, f"attention backend {name}"))
            return True
        return False

    def _on_fp8_kv(self, m, source, message, record):
        self._builder.run.notes.append((self.lines_read, "FP8 KV cache"))

    def _on_launch_command(self, m, source, message, record):
        text = m.group(0).split("`")[0].strip()
        if text.endswith("\\"):
            self._command = text.rstrip("\\")
            return True
        return self._launch(text, source)

    def _launch(self, text: str, source: SourceInfo) -> bool:
        import shlex

        from ..launch import LaunchLineError, parse_launch_line

        start = re.search(r"vllm serve|python3?\s+-m\s+vllm|-m\s+vllm", text)
        text = text[start.start():] if start else text
        if text.startswith("-m"):
            text = "python " + text
        try:
            words = shlex.split(text)
        except ValueError:
            words = text.split()
        for stop in ("&", "&&", "|", ";", ">", "2>&1", "#"):
            if stop in words:
                words = words[:words.index(stop)]
        try:
            line = parse_launch_line(words)
        except (LaunchLineError, ValueError):
            return False
        self._builder._kind("launch command", source)
        if line.model:
            self._builder.model(line.model, "launch command")
        for name, value in line.settings.items():
            self._builder.setting(name, value, "launch command", "launch command")
        if "--enable-prefix-caching" in words:
            self._builder.setting("enable_prefix_caching", True, "launch command", "launch command")
        if "--no-enable-prefix-caching" in words:
            self._builder.setting("enable_prefix_caching", False, "launch command", "launch command")
        entry = "serve" if ("serve" in words[:3] or any("api_server" in w for w in words[:4])) else None
        if entry:
            self._builder.setting("entrypoint", entry, "launch command", "launch command")
        return True

    def finish(self) -> ParsedLog:
        if self._command is not None:
            command, self._command = self._command, None
            self._launch(command, SourceInfo("", "rank 0", "main", True))
        runs = [run for run in self._builder.runs if run.lines_matched or run.figures or run.settings]
        if not runs:
            runs = [self._builder.runs[0]]
        # identity lines after the last figures (an excerpt quoted out of order) belong to the run before
        while len(runs) > 1 and not runs[-1].has_figures() and not runs[-1].failures:
            _merge_into(runs[-2], runs.pop())
        for index, run in enumerate(runs):
            run.index = index
        return ParsedLog(runs, self.lines_read, self.bytes_read, self.lines_matched, self.markers, self.truncated_lines)


def _merge_into(target: Run, extra: Run) -> None:
    for name, evidence in extra.settings.items():
        target.settings.setdefault(name, evidence)
    target.versions.extend(extra.versions)
    if target.model is None:
        target.model = extra.model
    target.notes.extend(extra.notes)
    target.gpu_names.extend(extra.gpu_names)
    target.successes.extend(extra.successes)
    target.engine_hint = target.engine_hint or extra.engine_hint
    target.world_size = target.world_size or extra.world_size
    target.markers.merge(extra.markers)
    for key, info in extra.sources.items():
        target.sources.setdefault(key, info)
    target.lines_matched += extra.lines_matched
    target.last_line = max(target.last_line, extra.last_line)


# --- config line and non-default args ------------------------------------------------------------------------

_CONFIG_FIELDS = (
    ("dtype", r"\bdtype=(?:torch\.)?(\w+)", str),
    ("max_model_len", r"\bmax_seq_len=(\d{1,15})", int),
    ("tensor_parallel_size", r"\btensor_parallel_size=(\d{1,15})", int),
    ("pipeline_parallel_size", r"\bpipeline_parallel_size=(\d{1,15})", int),
    ("data_parallel_size", r"\bdata_parallel_size=(\d{1,15})", int),
    ("quantization", r"\bquantization=([\w-]+)", str),
    ("enforce_eager", r"\benforce_eager=(True|False)", bool),
    ("kv_cache_dtype", r"\bkv_cache_dtype=(\w+)", str),
    ("enable_prefix_caching", r"\benable_prefix_caching=(True|False)", bool),
    ("enable_chunked_prefill", r"\b(?:chunked_prefill_enabled|enable_chunked_prefill)=(True|False)", bool),
)


def _config_settings(body: str) -> dict:
    out = {}
    for name, pattern, kind in _CONFIG_FIELDS:
        match = re.search(pattern, body)
        if match is None:
            continue
        raw = match.group(1)
        if kind is bool:
            out[name] = raw == "True"
        elif kind is int:
            out[name] = int(raw)
        elif raw != "None":
            out[name] = raw
    spec = re.search(r"\bspeculative_config=(None|\w+\()", body)
    if spec and spec.group(1) != "None":
        out["speculative_config"] = "set"
    return out


# the keys whose values a non-default-args line is read for; only these are scanned and evaluated, each over at
# most _MAX_VALUE_CHARS, at most _MAX_VALUES times (bounded work on a hostile line)
_DICT_KEYS = frozenset(SETTING_KEYS) | {"model", "model_tag"}
_MAX_VALUE_CHARS = 4096
_MAX_VALUES = 64


def _python_dict_items(body: str) -> dict:
    """Key/value pairs of a printed Python dict, tolerating '...' elisions and a cut end (the keys in _DICT_KEYS)."""
    out = {}
    budget = _MAX_VALUES
    for match in re.finditer(r"'(\w+)':\s*", body):
        if match.group(1) not in _DICT_KEYS:
            continue
        budget -= 1
        if budget < 0:
            break
        start = match.end()
        value_text = _literal_prefix(body, start)
        if value_text is None:
            continue
        try:
            out[match.group(1)] = ast.literal_eval(value_text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return out


def _literal_prefix(text: str, start: int) -> str | None:
    """The Python literal starting at text[start] (balanced brackets and quotes), or None."""
    depth, index, quote = 0, start, None
    cut = len(text) > start + _MAX_VALUE_CHARS  # a value this long is no setting: not read
    text = text[:start + _MAX_VALUE_CHARS]
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 2
                continue
            if char == quote:
                quote = None
                if depth == 0:
                    return text[start:index + 1]
        elif char in "'\"":
            quote = char
        elif char in "{[(":
            depth += 1
        elif char in "}])":
            if depth == 0:
                return text[start:index].strip() or None
            depth -= 1
            if depth == 0:
                return text[start:index + 1]
        elif char == "," and depth == 0:
            return text[start:index].strip() or None
        index += 1
    return text[start:].strip() or None if depth == 0 and not quote and not cut else None


def parse_lines(lines) -> ParsedLog:
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser.finish()


def parse_text(text: str) -> ParsedLog:
    return parse_lines((text or "").splitlines())


def parse_stream(stream, name: str = "input", parser: "LogParser | None" = None) -> ParsedLog:
    """Parse a binary stream; raises LogInputError for binary, empty or non-vLLM input. `parser`: a LogParser
    (or a subclass such as streaming.BoundedLogParser) to feed instead of a new one."""
    reader = LineReader(stream, name)
    parser = parser if parser is not None else LogParser()
    blank = True
    for line in reader:
        if blank and line.strip():
            blank = False
        parser.feed(line)
    parsed = parser.finish()
    parsed.bytes_read = reader.bytes_read
    parsed.truncated_lines = reader.truncated
    if blank:
        raise LogInputError(f"{name} is empty")
    if parser.lines_matched == 0:
        raise LogInputError(f"{name} has no vLLM memory lines ({parser.lines_read} lines read; expected lines such as "
                            "'Loading model weights took ...', '# GPU blocks: ...' or 'Available KV cache memory: ...')")
    return parsed


def parse_file(path: str) -> ParsedLog:
    with open(path, "rb") as stream:
        return parse_stream(stream, path)


def observed_from_log(text: str) -> dict:
    """SCHEMA `observed` figures of the first run of a log text (what the scorer's --from-logs uses)."""
    return parse_text(text).first.observed()
