"""A terminal sparkline of pool occupancy that fits 80 columns."""
from __future__ import annotations

from .result import SimulationResult

BARS = " ▁▂▃▄▅▆▇█"


def sparkline(values, width: int = 64, top: float | None = None) -> str:
    values = list(values)
    if not values:
        return ""
    step = len(values) / width if len(values) > width else 1
    picked = [max(values[int(i * step):max(int(i * step) + 1, int((i + 1) * step))])
              for i in range(min(width, len(values)))]
    top = top or max(picked) or 1
    return "".join(BARS[min(len(BARS) - 1, int(round(v / top * (len(BARS) - 1))))] for v in picked)


def occupancy_plot(result: SimulationResult, width: int = 64) -> str:
    """Three lines, at most 80 columns: the pool's blocks in use (max per bucket) against the pool size."""
    from .fit import shortfall_words

    event = shortfall_words(result.engine).event
    peaks = [peak for _, peak, _ in result.occupancy]
    line = sparkline(peaks, width, result.pool_blocks)
    gib = result.block_bytes / 2**30
    return "\n".join((
        f"pool  |{line}| {result.pool_blocks * gib:.1f} GiB",
        f"       0 s{' ' * max(0, len(line) - 14)}{result.duration_s:>8.0f} s",
        f"peak {result.peak_blocks * gib:.2f} GiB, p99 {result.p99_blocks * gib:.2f} GiB, "
        f"{result.preemptions} {event}(s), prefix hits {result.prefix_hit_rate:.0%}",
    ))
