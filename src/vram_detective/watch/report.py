"""What a series of scrapes shows (peaks, the arrival rate, lengths), and the answer as text or JSON."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

GIB = 1 << 30


@dataclass(frozen=True)
class Observed:
    engine: str
    scrapes: int
    seconds: float  # from the first scrape to the last
    usage_metric: str
    usage_peak: float | None
    usage_last: float | None
    running_peak: float | None
    waiting_peak: float | None
    arrival_rate: float | None  # finished requests per second between the first and the last scrape
    prompt_mean: float | None
    output_mean: float | None
    prompt_buckets: tuple
    output_buckets: tuple
    pool_tokens: int | None
    model: str | None
    settings: dict
    notes: tuple
    counts_requests: bool = True  # the engine exports a finished-request counter (llama-server does not)


def _peak(values) -> float | None:
    present = [v for v in values if v is not None and not math.isnan(v)]
    return max(present) if present else None


def rate(first: tuple[float, float | None], last: tuple[float, float | None]) -> float | None:
    """Requests per second from a counter read at two times; None without two readings or time between them."""
    (t0, c0), (t1, c1) = first, last
    if c0 is None or c1 is None or t1 <= t0 or c1 < c0:
        return None
    return (c1 - c0) / (t1 - t0)


def _mean(total, count) -> float | None:
    return total / count if total is not None and count else None


def observed(scrapes) -> Observed:
    """Fold the scrapes ([(seconds, LiveFigures)], in order) into one reading."""
    (t0, first), (t1, last) = scrapes[0], scrapes[-1]
    return Observed(
        engine=last.engine, scrapes=len(scrapes), seconds=t1 - t0, usage_metric=last.usage_metric,
        usage_peak=_peak(f.usage for _, f in scrapes), usage_last=last.usage,
        running_peak=_peak(f.running for _, f in scrapes), waiting_peak=_peak(f.waiting for _, f in scrapes),
        arrival_rate=rate((t0, first.finished), (t1, last.finished)),
        prompt_mean=_mean(last.prompt_sum, last.prompt_count), output_mean=_mean(last.output_sum, last.output_count),
        prompt_buckets=last.prompt_buckets, output_buckets=last.output_buckets, pool_tokens=last.pool_tokens,
        model=last.model, settings=dict(last.settings), notes=last.notes, counts_requests=last.finished is not None)


def lengths(buckets: tuple, mean: float | None, count: int) -> list[int]:
    """`count` lengths spread as the histogram's cumulative buckets say (linear inside a bucket), scaled so their
    mean is the histogram's exact mean; all equal to the mean without buckets."""
    if mean is None or count <= 0:
        return []
    finite = [(bound, seen) for bound, seen in buckets if math.isfinite(bound)]
    total = buckets[-1][1] if buckets else 0
    if not finite or total <= 0:
        return [max(1, round(mean))] * count
    out = []
    for i in range(count):
        target = (i + 0.5) / count * total
        low_bound, low_seen = 0.0, 0.0
        value = finite[-1][0]
        for bound, seen in finite:
            if seen >= target:
                share = (target - low_seen) / (seen - low_seen) if seen > low_seen else 0.5
                value = low_bound + share * (bound - low_bound)
                break
            low_bound, low_seen = bound, seen
        out.append(value)
    scale = mean / (sum(out) / count) if sum(out) else 1.0
    return [max(1, round(value * scale)) for value in out]


def render(url: str, live: Observed, answer: dict, as_json: bool = False) -> str:
    if as_json:
        return json.dumps({"url": url, "observed": asdict(live), **answer}, indent=2, default=str)
    from ..engines import get_engine

    label = get_engine(live.engine).label
    lines = [f"{label} at {url}: {live.scrapes} scrape(s) over {live.seconds:.1f} s"]
    if live.usage_peak is not None:
        lines.append(f"  KV pool in use: peak {live.usage_peak:.0%}, now {live.usage_last:.0%} ({live.usage_metric})")
    if live.running_peak is not None:
        lines.append(f"  requests: up to {live.running_peak:g} running, {live.waiting_peak or 0:g} waiting")
    if live.pool_tokens:
        lines.append(f"  the pool as {label} reports it: {live.pool_tokens:,} tokens")
    traffic = []
    if live.arrival_rate is not None:
        traffic.append(f"{live.arrival_rate:.2f} requests/s")
    if live.prompt_mean is not None:
        traffic.append(f"prompts ~{live.prompt_mean:,.0f} tokens")
    if live.output_mean is not None:
        traffic.append(f"outputs ~{live.output_mean:,.0f} tokens")
    if traffic:
        lines.append("  traffic: " + ", ".join(traffic))
    lines += [f"  {line}" for line in answer.get("lines", ())]
    lines += [f"note: {note}" for note in (*live.notes, *answer.get("notes", ()))]
    return "\n".join(lines)
