"""The one result type: a tree of named byte amounts per GPU, each with a reason and a source.

A prediction produces a Breakdown; a parsed engine log produces an ObservedBreakdown
(forensics/observed.py) with the same figures, each optional because a log may lack it, so the two are
compared figure by figure.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .units import GIB


@dataclass(frozen=True)
class Component:
    key: str  # dotted path, e.g. "weights.attention"
    label: str
    bytes: int
    reason: str = ""
    source: str = ""  # engine file and release, or the measurement, behind the figure
    children: tuple["Component", ...] = ()

    @property
    def gib(self) -> float:
        return self.bytes / GIB

    def find(self, key: str) -> "Component | None":
        if self.key == key:
            return self
        for child in self.children:
            found = child.find(key)
            if found is not None:
                return found
        return None

    def to_dict(self) -> dict:
        out = {"key": self.key, "label": self.label, "bytes": self.bytes, "gib": round(self.gib, 4)}
        if self.reason:
            out["reason"] = self.reason
        if self.source:
            out["source"] = self.source
        if self.children:
            out["children"] = [child.to_dict() for child in self.children]
        return out


@dataclass(frozen=True)
class Setting:
    name: str  # vLLM's argument name in snake_case
    value: object
    given: bool  # True when the user set it, False when resolved from the release's defaults
    reason: str = ""


@dataclass(frozen=True)
class StartupFailure:
    message: str  # phrased as that release phrases it
    largest_fitting_max_model_len: int | None = None


@dataclass(frozen=True)
class RankFigures:
    """What one GPU worker holds and computes."""

    rank: int
    pipeline_stage: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    kv_cache_bytes: int  # available KV memory as this worker computed it
    num_layers: int
    kv_bytes_per_block: int
    num_blocks_own: int  # before the minimum over workers
    # what makes this rank's own column add up: budget = weights + activation peak + non-torch + other_budgeted
    # + kv_cache (available), and available = the pool this rank allocates + what it leaves unused (the engine
    # keeps the smallest rank's block count); 0 where an engine does not fill them in
    budget_bytes: int = 0
    other_budgeted_bytes: int = 0  # inside the budget besides the above (graphs subtracted, V0 Mamba state)
    kv_pool_bytes: int = 0

    @property
    def kv_unused_bytes(self) -> int:
        """Available KV memory the pool does not use (negative when a given pool size exceeds the budget)."""
        return self.kv_cache_bytes - self.kv_pool_bytes


@dataclass(frozen=True)
class EngineFigure:
    """A figure only some engines have (vLLM's block counts, budget, CUDA-graph pool...), named and
    labelled by the engine so renderers print it without knowing the engine."""

    key: str  # attribute name, e.g. "num_gpu_blocks"; a "_bytes" key is a byte amount (JSON: "_gib")
    value: object
    label: str = ""  # the row label in the KV table; "" = JSON only
    text: str = ""  # the value as that row prints it
    schema: tuple[str, ...] = ()  # its names among shared/groundtruth/SCHEMA.md's `observed` keys

    @property
    def json_key(self) -> str:
        return self.key[: -len("_bytes")] + "_gib" if self.key.endswith("_bytes") else self.key


class _EnginePart:
    """An engine-only figure kept readable under its old attribute name (e.g. Breakdown.num_gpu_blocks)."""

    def __set_name__(self, owner, name: str):
        self.name = name

    def __get__(self, instance, owner=None):
        return self if instance is None else instance.figure(self.name)


@dataclass(frozen=True)
class Interval:
    """A predicted figure's interval from the scored errors of its term (intervals.py, data/intervals.json)."""

    key: str  # SCHEMA.md `observed` key, e.g. "kv_cache_gib"
    value: float
    low: float
    high: float
    level: float  # 0.9: the share of scored observations such an interval held
    basis: str  # the group of scored cases it comes from

    def to_dict(self) -> dict:
        return {"key": self.key, "value": round(self.value, 4), "low": round(self.low, 4), "high": round(self.high, 4),
                "level": self.level, "basis": self.basis}


@dataclass(frozen=True)
class DeviceFigures:
    """One GPU of a multi-GPU answer as the engine places the model on it (a tensor-parallel rank, a pipeline
    stage's rank, a llama.cpp device): what nvidia-smi will show there and what it is made of. Engines fill
    these in; renderers draw one bar and one nvidia-smi figure per entry without knowing the engine."""

    name: str  # how the user finds it in nvidia-smi's list: "GPU 0"
    role: str  # what the engine puts there, in its own words: "rank 1 (stage 0, TP rank 1)", "CUDA1: 32 layers"
    total_bytes: int  # the card's memory as CUDA reports it
    weights_bytes: int
    kv_cache_bytes: int  # the KV (and recurrent state) pool allocated on this GPU
    nvidia_smi_used_mib: int
    # what nvidia-smi counts on it, leaf by leaf (weights, KV pool, context, graphs, compute buffers...): the
    # web bar's segments; together they make nvidia_smi_used_mib (within MiB rounding)
    parts: tuple[Component, ...] = ()

    @property
    def other_bytes(self) -> int:
        """What nvidia-smi counts beyond the weights and the KV pool (context, graphs, buffers, activations)."""
        return max(self.nvidia_smi_used_mib * (1 << 20) - self.weights_bytes - self.kv_cache_bytes, 0)

    @property
    def free_bytes(self) -> int:
        return max(self.total_bytes - self.nvidia_smi_used_mib * (1 << 20), 0)

    def to_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "total_gib": round(self.total_bytes / GIB, 4),
                "weights_gib": round(self.weights_bytes / GIB, 4), "kv_cache_gib": round(self.kv_cache_bytes / GIB, 4),
                "other_gib": round(self.other_bytes / GIB, 4), "free_gib": round(self.free_bytes / GIB, 4),
                "nvidia_smi_used_mib": self.nvidia_smi_used_mib,
                "parts": [{"key": p.key, "label": p.label, "gib": round(p.bytes / GIB, 4)} for p in self.parts]}


@dataclass(frozen=True)
class Breakdown:
    """What every engine predicts, plus `engine_figures`: the figures only this engine has."""

    model: str
    gpu_name: str
    total_gpu_bytes: int  # what cudaMemGetInfo reports
    engine_name: str  # registry name: "vllm"
    engine_label: str  # how people write it: "vLLM"
    engine_version: str
    engine_variant: str  # the engine's own path as printed, e.g. vLLM's "V1"; "" when it has one path
    settings: tuple[Setting, ...]
    components: Component  # the tree: budget -> weights / activation / non-torch / graphs / KV
    weights_bytes: int
    kv_cache_bytes: int  # memory for the KV pool as the engine computed it
    kv_bytes_per_token: int
    kv_cache_tokens: int
    max_concurrency: float  # requests of max_model_len tokens the pool holds
    max_model_len: int
    nvidia_smi_used_mib: int
    outside_budget: Component
    log_lines: tuple[str, ...]
    engine_figures: tuple[EngineFigure, ...] = ()
    weights_explained: tuple[Component, ...] = ()
    weights_whatif: tuple[Component, ...] = ()  # levers on the weights (negative bytes: a saving)
    notes: tuple[str, ...] = ()
    failure: StartupFailure | None = None
    per_rank: tuple[RankFigures, ...] = field(default_factory=tuple)
    intervals: tuple[Interval, ...] = ()  # one per predicted figure the scorer has errors for (intervals.py)
    verdict_margin: str = ""  # "starts, 1.2 GiB to spare" / "borderline: ..." (intervals.py)
    # one entry per GPU when the model spans several (the engine's placement); () on one GPU
    devices: tuple[DeviceFigures, ...] = ()

    # vLLM's figures under their old names (None on an engine without them)
    vllm_version = _EnginePart()
    engine = _EnginePart()  # vLLM's path: "v0" or "v1"
    activation_peak_bytes = _EnginePart()
    non_torch_bytes = _EnginePart()
    cuda_graph_bytes = _EnginePart()
    cuda_graph_budgeted = _EnginePart()
    budget_bytes = _EnginePart()
    num_gpu_blocks = _EnginePart()
    num_cpu_blocks = _EnginePart()
    block_size = _EnginePart()

    def figure(self, key: str, default: object = None) -> object:
        for item in self.engine_figures:
            if item.key == key:
                return item.value
        return default

    def setting(self, name: str) -> object:
        for item in self.settings:
            if item.name == name:
                return item.value
        raise KeyError(name)
