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


@dataclass(frozen=True)
class Breakdown:
    model: str
    gpu_name: str
    total_gpu_bytes: int  # what cudaMemGetInfo reports (vLLM's total_gpu_memory)
    vllm_version: str
    engine: str  # "v0" or "v1"
    settings: tuple[Setting, ...]
    components: Component  # the tree: budget -> weights / activation / non-torch / graphs / KV
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    cuda_graph_bytes: int
    cuda_graph_budgeted: bool
    budget_bytes: int
    kv_cache_bytes: int
    num_gpu_blocks: int
    num_cpu_blocks: int
    block_size: int
    kv_bytes_per_token: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    nvidia_smi_used_mib: int
    outside_budget: Component
    log_lines: tuple[str, ...]
    weights_explained: tuple[Component, ...] = ()
    weights_whatif: tuple[Component, ...] = ()  # levers on the weights (negative bytes: a saving)
    notes: tuple[str, ...] = ()
    failure: StartupFailure | None = None
    per_rank: tuple[RankFigures, ...] = field(default_factory=tuple)

    def setting(self, name: str) -> object:
        for item in self.settings:
            if item.name == name:
                return item.value
        raise KeyError(name)
