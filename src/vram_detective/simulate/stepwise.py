"""The vLLM simulator one scheduler step at a time, in the series vLLM's own Scheduler is read in
(benchmarks/vllm_scheduler_driver.py): what benchmarks/scheduler_conformance.py compares and what
tests/test_scheduler_conformance.py checks against the committed series of the real scheduler.

A trace (a dict, the driver's input format): a pinned pool (num_blocks, block_size, max_num_seqs,
max_num_batched_tokens, max_model_len, prefix_caching, groups [["full", None] | ["sliding", W]]) and requests
[[prompt, output, prefix (-1: none), prefix_tokens], ...], all arriving at t = 0 in order. A row a step:
[used blocks (the null block included), running, waiting, preempted request indexes, prefix-hit tokens of the
requests admitted, finished request indexes, lookup queries, lookup hits (vLLM's counter: every lookup)].
"""
from __future__ import annotations

from .arrivals import Arrivals
from .cost import CostModel
from .pool import KvGroup, PoolSpec
from .result import Recorder
from .rules import rules_for
from .workloads import Request, Workload

# every step lasts 1 s when it decodes; prefills cost nothing (the pinned cost model)
STEP_COST = CostModel(decode_step_s=1.0, per_seq_s=0.0, prefill_tokens_per_s=1e15)
FIELDS = ("used", "running", "waiting", "preempted", "hits", "finished", "queries", "query_hits")


def trace_pool(trace: dict, version: str = "0.11.0", engine: str = "vllm") -> PoolSpec:
    """The trace's pool; `async_scheduling` (absent: off, as vLLM's driver's CPU config resolves it) sets the
    tokens in flight as the engine's config does at that release (vLLM: two batches from 0.26.0)."""
    from ..engines import get_engine
    from ..engines.base import pool_simulation

    groups = tuple(KvGroup(kind, window, 1) for kind, window in trace["groups"])
    tokens_in_flight = pool_simulation(get_engine(engine)).in_flight
    in_flight = (tokens_in_flight(version, trace["max_num_batched_tokens"], bool(trace.get("async_scheduling")))
                 if tokens_in_flight else 0)
    return PoolSpec(engine, version, "v1", num_blocks=trace["num_blocks"], block_size=trace["block_size"],
                    block_bytes=1, max_num_seqs=trace["max_num_seqs"],
                    max_num_batched_tokens=trace["max_num_batched_tokens"], max_model_len=trace["max_model_len"],
                    groups=groups, prefix_caching=bool(trace["prefix_caching"]), chunked_prefill=True,
                    in_flight_tokens=in_flight)


def trace_requests(trace: dict) -> tuple[Request, ...]:
    return tuple(Request(0.0, prompt, output, f"p{prefix}" if prefix >= 0 else None, prefix_tokens if prefix >= 0
                         else 0, f"r{index}") for index, (prompt, output, prefix, prefix_tokens)
                 in enumerate(trace["requests"]))


def step_rows(trace: dict, version: str = "0.11.0", max_steps: int = 200_000, rules=None,
              engine: str = "vllm") -> list[list]:
    """The simulator's rows for `trace` (see the module's doc), step by step (no fast-forward); `rules`:
    EngineRules instead of the release's; `engine`: whose simulator (SGLang's rows: the first six fields)."""
    from . import _simulator

    pool = trace_pool(trace, version, engine)
    requests = trace_requests(trace)
    index = {id(r): i for i, r in enumerate(requests)}
    workload = Workload("trace", trace=requests, duration=1.0)
    rec = Recorder(pool.num_blocks, 4, 1.0)
    finished: list[int] = []
    preempted: list[int] = []
    arrivals = Arrivals(workload, 0)
    on_finish = arrivals.finished

    def finish(request, t):
        finished.append(index[id(request)])
        on_finish(request, t)

    arrivals.finished = finish
    on_preempt = rec.preempt

    def preempt(t, number, cause, mode):
        preempted.append(number)
        on_preempt(t, number, cause, mode)

    rec.preempt = preempt
    sim = _simulator(engine)(pool, rules or rules_for(pool), STEP_COST, arrivals, rec)
    sim.rejected = 0
    rows: list[list] = []
    while (sim.running or sim.waiting or arrivals.heap) and len(rows) < max_steps:
        hits, queries, qhits = rec.hit_tokens, rec.lookup_queries, rec.lookup_hits
        sim._step()
        rows.append([sim.blocks.size - sim.blocks.nfree, len(sim.running), len(sim.waiting), sorted(preempted),
                     rec.hit_tokens - hits, sorted(finished), rec.lookup_queries - queries, rec.lookup_hits - qhits])
        preempted.clear()
        finished.clear()
    return rows


def first_divergence(real: list[list], simulated: list[list]) -> str | None:
    """'step S: FIELD real X, simulated Y' at the first step whose rows differ, or None."""
    for step, (a, b) in enumerate(zip(real, simulated)):
        for name, x, y in zip(FIELDS, a, b):
            if x != y:
                return f"step {step}: {name} real {x}, simulated {y}"
    if len(real) != len(simulated):
        return f"steps: real {len(real)}, simulated {len(simulated)}"
    return None
