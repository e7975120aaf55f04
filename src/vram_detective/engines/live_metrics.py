"""What a running engine's Prometheus endpoint says about its KV pool and traffic, in one shape for every engine.
Each engine reads its own metric names by release (engines/<engine>/metrics.py, `engine.live_metrics`)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LiveFigures:
    engine: str  # the engine whose metrics these are
    usage: float | None  # the KV pool's used fraction now (0..1); None when the engine exports none
    usage_metric: str  # the metric it came from (by release: vllm:gpu_cache_usage_perc / kv_cache_usage_perc)
    running: float | None
    waiting: float | None
    finished: float | None  # requests finished so far (a counter): the arrival rate from two scrapes
    prompt_sum: float | None = None  # prompt tokens of the finished requests (histogram sum) and their count
    prompt_count: float | None = None
    output_sum: float | None = None
    output_count: float | None = None
    prompt_buckets: tuple = ()  # cumulative (upper bound, count): lengths for the simulation
    output_buckets: tuple = ()
    pool_tokens: int | None = None  # the pool as the engine reports it (vLLM: blocks x block size)
    model: str | None = None  # the served model name
    settings: dict = field(default_factory=dict)  # the engine's settings its metrics state, in its own names
    notes: tuple = ()  # what this release's metrics cannot say
