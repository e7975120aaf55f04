"""What a simulation reports, and the bookkeeping every engine's simulator shares (Recorder)."""
from __future__ import annotations

import csv
import io
import json
from operator import mul
from dataclasses import asdict, dataclass, field

from ..budget import check as budget_check
from .series import Histogram, Series

MAX_LISTED_PREEMPTIONS = 200


@dataclass(frozen=True)
class Preemption:
    time_s: float
    request: int  # the request's number in arrival order
    cause: str  # e.g. "decode of request 7 needed a block; no free block"
    mode: str  # "recompute", "swap", "retract", "context shift"


@dataclass(frozen=True)
class SimulationResult:
    engine: str
    pool_blocks: int
    block_size: int
    block_bytes: int
    duration_s: float
    requests: int
    finished: int
    peak_blocks: int  # blocks held by requests (cached free blocks are free, as the engine counts them)
    p99_blocks: int  # time-weighted
    mean_blocks: float
    peak_running: int
    peak_waiting: int
    preemptions: int
    preempted_requests: int
    preemption_log: tuple[Preemption, ...]
    prefix_hit_tokens: int
    prompt_tokens: int
    swap_out_bytes: int
    swap_in_bytes: int
    request_steps: int
    occupancy: tuple[tuple[float, float, float], ...]  # (bucket start s, max blocks, mean blocks)
    running_series: tuple[tuple[float, float, float], ...]
    waiting_series: tuple[tuple[float, float, float], ...]
    notes: tuple[str, ...] = field(default=())
    held_back_requests: int = 0  # requests that waited at the head of the queue for free blocks
    # the engine's own prefix-cache counter (vLLM: every lookup, a blocked request's retries too; 0.12+ leaves
    # preempted requests out), beside prefix_hit_tokens / prompt_tokens (once per admission)
    lookup_queries: int = 0
    lookup_hits: int = 0
    reserved_blocks: int = 0  # blocks the pool keeps for itself (vLLM V1's null block), counted in *_blocks

    @property
    def engine_hit_rate(self) -> float:
        """The prefix-cache hit rate as the engine's stats line prints it (its own counter)."""
        return self.lookup_hits / self.lookup_queries if self.lookup_queries else 0.0

    def engine_usage_pct(self, blocks: float) -> float:
        """Blocks in use as the engine's 'KV cache usage' reports them: the reserved block is neither in use
        nor in the pool (vLLM V1 BlockPool.get_usage, v1/core/block_pool.py 0.11.0: 'Subtract 1 to account
        for null block')."""
        pool = self.pool_blocks - self.reserved_blocks
        return 100.0 * max(blocks - self.reserved_blocks, 0) / pool if pool > 0 else 0.0

    @property
    def short_of_memory_fraction(self) -> float:
        """Requests preempted or held back for blocks, as a fraction (a request may count twice)."""
        return (self.preempted_requests + self.held_back_requests) / self.requests if self.requests else 0.0

    @property
    def prefix_hit_rate(self) -> float:
        return self.prefix_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def preempted_fraction(self) -> float:
        return self.preempted_requests / self.requests if self.requests else 0.0

    @property
    def peak_bytes(self) -> int:
        return self.peak_blocks * self.block_bytes

    @property
    def p99_bytes(self) -> int:
        return self.p99_blocks * self.block_bytes

    def to_dict(self) -> dict:
        out = asdict(self)
        out.update(prefix_hit_rate=round(self.prefix_hit_rate, 4), engine_hit_rate=round(self.engine_hit_rate, 4),
                   peak_usage_pct=round(self.engine_usage_pct(self.peak_blocks), 1),
                   p99_usage_pct=round(self.engine_usage_pct(self.p99_blocks), 1),
                   preempted_fraction=round(self.preempted_fraction, 4),
                   peak_bytes=self.peak_bytes, p99_bytes=self.p99_bytes, pool_bytes=self.pool_blocks * self.block_bytes)
        return out


def to_json(result: SimulationResult) -> str:
    return json.dumps(result.to_dict(), indent=1)


def to_csv(result: SimulationResult) -> str:
    """The downsampled series, one row a bucket."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["time_s", "blocks_max", "blocks_mean", "bytes_max", "running_max", "waiting_max"])
    for i, (t, peak, mean) in enumerate(result.occupancy):
        running = result.running_series[i][1] if i < len(result.running_series) else 0
        waiting = result.waiting_series[i][1] if i < len(result.waiting_series) else 0
        writer.writerow([round(t, 3), int(peak), round(mean, 2), int(peak) * result.block_bytes, int(running), int(waiting)])
    return out.getvalue()


class Recorder:
    """Counters and bounded series, updated by a simulator as its state changes."""

    def __init__(self, capacity: int, buckets: int = 512, bucket_s: float = 1.0):
        self.hist = Histogram(capacity)
        self.blocks = Series(buckets, bucket_s)
        self.running = Series(buckets, bucket_s)
        self.waiting = Series(buckets, bucket_s)
        self.last = (-1, -1, -1)
        self.preemptions: list[Preemption] = []
        self.preemption_count = 0
        self.preempted: set[int] = set()
        self.held: set[int] = set()  # requests admission held back for blocks
        self.hit_tokens = self.prompt_tokens = self.swap_out = self.swap_in = 0
        self.request_steps = self.arrived = self.finished = 0
        # vLLM's own prefix-cache counter (v1/core/kv_cache_manager.py get_computed_blocks, 0.11.0): every lookup
        # counts, a blocked request's retries too; hit_tokens / prompt_tokens count once per admission
        self.lookup_queries = self.lookup_hits = 0
        self.peak_running = self.peak_waiting = 0
        self.steps = 0

    def tick(self) -> None:
        """Once a scheduler step: every 1024 steps, the web server's per-request budget (budget.py)."""
        self.steps += 1
        if not self.steps & 1023:
            budget_check()

    def state(self, t: float, used: int, running: int, waiting: int) -> None:
        last = self.last
        if used != last[0]:
            self.hist.set(t, used)
            self.blocks.record(t, used)
        if running != last[1]:
            self.running.record(t, running)
            self.peak_running = max(self.peak_running, running)
        if waiting != last[2]:
            self.waiting.record(t, waiting)
            self.peak_waiting = max(self.peak_waiting, waiting)
        self.last = (used, running, waiting)

    def preempt(self, t: float, request: int, cause: str, mode: str) -> None:
        self.preemption_count += 1
        self.preempted.add(request)
        if len(self.preemptions) < MAX_LISTED_PREEMPTIONS:
            self.preemptions.append(Preemption(round(t, 6), request, cause, mode))

    def result(self, engine: str, pool, t: float, notes: tuple[str, ...] = ()) -> SimulationResult:
        self.hist.set(t, self.hist.level)
        occupancy = self.blocks.finish(t)
        total = sum(self.hist.seconds)
        seconds = self.hist.seconds
        mean = sum(map(mul, range(len(seconds)), seconds)) / total if total else 0.0  # level x seconds, in C
        return SimulationResult(
            engine=engine, pool_blocks=pool.num_blocks, block_size=pool.block_size, block_bytes=pool.block_bytes,
            duration_s=t, requests=self.arrived, finished=self.finished, peak_blocks=self.hist.peak,
            p99_blocks=self.hist.percentile(0.99), mean_blocks=mean, peak_running=self.peak_running,
            peak_waiting=self.peak_waiting, preemptions=self.preemption_count, preempted_requests=len(self.preempted),
            preemption_log=tuple(self.preemptions), prefix_hit_tokens=self.hit_tokens, prompt_tokens=self.prompt_tokens,
            swap_out_bytes=self.swap_out, swap_in_bytes=self.swap_in, request_steps=self.request_steps,
            occupancy=occupancy, running_series=self.running.finish(t), waiting_series=self.waiting.finish(t),
            notes=notes, held_back_requests=len(self.held), lookup_queries=self.lookup_queries,
            lookup_hits=self.lookup_hits,
        )
