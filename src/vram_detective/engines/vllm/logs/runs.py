"""One engine start in a vLLM log and what it printed: figures per rank, settings with where they were read,
the release, model, failures; the builder that starts a new run when the log restarts (reader.py feeds it).
Figures carry SCHEMA.md's `observed` key names (shared/groundtruth/SCHEMA.md)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .eras import FormatMarkers

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
