"""The observation as a Breakdown-shaped record.

`Breakdown` (breakdown.py) is what a prediction fills, and every one of its figures is required; a log
prints only some of them. `ObservedBreakdown` has the same figure fields, one for one, each None when
the log did not print it (and could not imply it), so observation and prediction compare field by field
(`FIELDS` maps each Breakdown field to SCHEMA.md's `observed` key). Sizes are bytes here, converted from
the printed GiB; `printed` keeps the figures exactly as printed (with their rounding).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..breakdown import Setting, StartupFailure
from ..observed_keys import LABELS  # noqa: F401 - the figures' names (also read from here)
from ..units import GIB

# Breakdown field -> SCHEMA observed key, unit ("bytes" = printed in GiB, else as printed)
FIELDS = (
    ("total_gpu_bytes", "total_gpu_memory_gib", "bytes"),
    ("budget_bytes", "requested_memory_gib", "bytes"),
    ("weights_bytes", "weights_gib", "bytes"),
    ("activation_peak_bytes", "activation_peak_gib", "bytes"),
    ("non_torch_bytes", "non_torch_gib", "bytes"),
    ("cuda_graph_bytes", "cuda_graph_gib", "bytes"),
    ("cuda_graph_estimate_bytes", "cuda_graph_estimate_gib", "bytes"),
    ("kv_cache_bytes", "kv_cache_gib", "bytes"),
    ("num_gpu_blocks", "num_gpu_blocks", "count"),
    ("num_cpu_blocks", "num_cpu_blocks", "count"),
    ("kv_cache_tokens", "kv_cache_tokens", "count"),
    ("max_concurrency", "max_concurrency", "ratio"),
    ("max_model_len", "max_concurrency_tokens", "count"),
    ("nvidia_smi_used_mib", "nvidia_smi_used_mib", "MiB"),
)


@dataclass(frozen=True)
class ObservedRank:
    """What one rank printed (its label as the log shows it: 'rank 0', 'TP1', 'worker pid 123')."""

    rank: str
    figures: dict  # SCHEMA observed keys


@dataclass(frozen=True)
class ObservedBreakdown:
    model: str | None
    gpu_name: str | None
    total_gpu_bytes: int | None
    vllm_version: str | None
    engine: str | None
    settings: tuple[Setting, ...]
    weights_bytes: int | None
    activation_peak_bytes: int | None
    non_torch_bytes: int | None
    cuda_graph_bytes: int | None
    cuda_graph_budgeted: bool | None
    budget_bytes: int | None
    kv_cache_bytes: int | None
    num_gpu_blocks: int | None
    num_cpu_blocks: int | None
    block_size: int | None
    kv_bytes_per_token: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    max_model_len: int | None
    nvidia_smi_used_mib: int | None
    failure: StartupFailure | None
    per_rank: tuple[ObservedRank, ...] = ()
    # figures a Breakdown does not have
    cuda_graph_estimate_bytes: int | None = None
    nvidia_smi_total_mib: int | None = None
    startup_failed: bool | None = None
    printed: dict = field(default_factory=dict)  # SCHEMA observed object, values as printed

    def figures(self) -> dict:
        """SCHEMA.md's `observed` object."""
        return dict(self.printed)

    def setting(self, name: str):
        for item in self.settings:
            if item.name == name:
                return item.value
        raise KeyError(name)


class ObservedValueError(ValueError):
    """An observed figure that is no size (NaN, infinite, not a number)."""


def _bytes(value, key: str = "figure") -> int | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ObservedValueError(f"observed {key} = {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(number) or abs(number) > 1 << 40:
        raise ObservedValueError(f"observed {key} = {number} is not a finite size in GiB")
    return int(round(number * GIB))


def build_observed(observed: dict, *, model: str | None = None, gpu_name: str | None = None,
                   vllm_version: str | None = None, engine: str | None = None, settings: dict | None = None,
                   per_rank: dict | None = None, failure_message: str | None = None,
                   block_size: int | None = None, kv_bytes_per_token: int | None = None,
                   cuda_graph_budgeted: bool | None = None) -> ObservedBreakdown:
    """From SCHEMA observed figures (and what was inferred around them) to the Breakdown-shaped record."""
    settings = settings or {}
    tokens = observed.get("kv_cache_tokens")
    kv = observed.get("kv_cache_gib")
    if kv_bytes_per_token is None and tokens and kv and isinstance(kv, (int, float)) and 0 < kv < 1 << 40:
        kv_bytes_per_token = int(round(kv * GIB / tokens))
    failed = observed.get("startup_failed")
    failure = StartupFailure(failure_message or "the log shows a failed start") if failed else None
    return ObservedBreakdown(
        model=model, gpu_name=gpu_name, total_gpu_bytes=_bytes(observed.get("total_gpu_memory_gib"), "total_gpu_memory_gib"),
        vllm_version=vllm_version, engine=engine,
        settings=tuple(Setting(name, value, True, "") for name, value in settings.items()),
        weights_bytes=_bytes(observed.get("weights_gib"), "weights_gib"),
        activation_peak_bytes=_bytes(observed.get("activation_peak_gib"), "activation_peak_gib"),
        non_torch_bytes=_bytes(observed.get("non_torch_gib"), "non_torch_gib"),
        cuda_graph_bytes=_bytes(observed.get("cuda_graph_gib"), "cuda_graph_gib"), cuda_graph_budgeted=cuda_graph_budgeted,
        budget_bytes=_bytes(observed.get("requested_memory_gib"), "requested_memory_gib"), kv_cache_bytes=_bytes(kv, "kv_cache_gib"),
        num_gpu_blocks=observed.get("num_gpu_blocks"), num_cpu_blocks=observed.get("num_cpu_blocks"),
        block_size=block_size, kv_bytes_per_token=kv_bytes_per_token, kv_cache_tokens=tokens,
        max_concurrency=observed.get("max_concurrency"),
        max_model_len=observed.get("max_concurrency_tokens", settings.get("max_model_len")),
        nvidia_smi_used_mib=observed.get("nvidia_smi_used_mib"), failure=failure,
        per_rank=tuple(ObservedRank(rank, figures) for rank, figures in (per_rank or {}).items()),
        cuda_graph_estimate_bytes=_bytes(observed.get("cuda_graph_estimate_gib"), "cuda_graph_estimate_gib"),
        nvidia_smi_total_mib=observed.get("nvidia_smi_total_mib"), startup_failed=failed, printed=dict(observed),
    )


def half_unit(value) -> float:
    """Half of the last printed digit (6.37 -> 0.005): the rounding interval of a logged figure."""
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int):
        return 0.5
    text = repr(float(value))
    if "e" in text or "." not in text:
        return 0.5
    return 0.5 * 10 ** -len(text.split(".")[1])
