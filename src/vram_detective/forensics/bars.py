"""The stacked bar `explain` draws (summary.bar_lines), from the figures a log or nvidia-smi showed."""
from __future__ import annotations

from dataclasses import dataclass

from ..units import GIB


@dataclass(frozen=True)
class _Part:
    label: str
    bytes: int


@dataclass(frozen=True)
class _Outside:
    children: tuple


@dataclass(frozen=True)
class ObservedBar:
    """The fields summary.bar_parts reads from a Breakdown, filled from observed figures."""

    weights_bytes: int
    kv_cache_bytes: int
    nvidia_smi_used_mib: int
    total_gpu_bytes: int
    outside_budget: _Outside = _Outside((_Part("CUDA context", 1),))


def observed_bar_lines(weights_gib: float, kv_gib: float, used_gib: float, total_gib: float,
                       columns: int | None) -> list[str]:
    """[█ weights ▓ KV pool ▒ context, graphs · free] over the card's total, with its legend."""
    from ..summary import bar_lines

    bar = ObservedBar(int(weights_gib * GIB), int(max(kv_gib, 0.0) * GIB), int(round(used_gib * 1024)),
                      int(max(total_gib, used_gib) * GIB))
    return bar_lines(bar, columns)


def device_bar_lines(device, columns: int | None) -> list[str]:
    """One GPU of a multi-GPU answer (breakdown.DeviceFigures) as the same bar over its own card."""
    from ..summary import bar_lines

    return bar_lines(ObservedBar(device.weights_bytes, max(device.kv_cache_bytes, 0), device.nvidia_smi_used_mib,
                                 device.total_bytes), columns)
