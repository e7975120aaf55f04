"""The pool at work: a discrete-event simulation of an engine's KV-cache manager over the predicted pool,
against a request workload (issue 18). The point is memory (how much of the pool the traffic holds, when
the scheduler preempts), not latency: step times come from a simple documented cost model (cost.py).

    from vram_detective.simulate import simulate, pool_from_breakdown, parse_workload
    result = simulate(pool_from_breakdown(breakdown), parse_workload("chat:rate=5"), seed=0)
"""
from __future__ import annotations

import gc
from dataclasses import replace

from .arrivals import Arrivals
from .cost import CostModel, cost_for
from .pool import KvGroup, PoolSpec, pool_from_breakdown
from .result import Recorder, SimulationResult, to_csv, to_json
from .rules import EngineRules, rules_for
from .workloads import Request, Workload, parse_workload, read_trace

__all__ = ["simulate", "pool_from_breakdown", "parse_workload", "read_trace", "PoolSpec", "KvGroup", "Workload",
           "Request", "CostModel", "cost_for", "SimulationResult", "EngineRules", "rules_for", "to_csv", "to_json"]


def simulate(pool: PoolSpec, workload: Workload, engine_rules: EngineRules | None = None, seed: int = 0,
             cost: CostModel | None = None, buckets: int = 240) -> SimulationResult:
    """Run `workload` against `pool` under the engine's rules (default: the pool's release, rules.py)."""
    rules = engine_rules or rules_for(pool)
    notes = ["memory, not latency: step times come from a simple per-token cost model (simulate/cost.py)"]
    if pool.engine == "sglang" and pool.block_size < SGLANG_GRAIN:
        # a token-granular pool tracked in 16-token pages: at most 15 tokens per live request over
        pool = coarse_pool(pool, SGLANG_GRAIN)
        notes.append(f"SGLang's token pool tracked in pages of {SGLANG_GRAIN} tokens")
    # llama.cpp shifts a full slot's context instead of bounding requests by it
    if workload.max_model_len != pool.max_model_len and pool.max_model_len and pool.engine != "llamacpp":
        workload = replace(workload, max_model_len=pool.max_model_len)
    cost = cost or CostModel()
    rec = Recorder(pool.num_blocks, buckets, max(workload.duration, 1.0) / buckets)
    arrivals = Arrivals(workload, seed)
    simulator = _simulator(pool.engine)(pool, rules, cost, arrivals, rec)
    # a run makes no reference cycles (its objects go when their last reference does), so the cyclic collector
    # only walks the pool's long lists again and again: a tenth of a multi-group run; paused while it runs
    collecting = gc.isenabled()
    gc.disable()
    try:
        end = simulator.run()
    finally:
        if collecting:
            gc.enable()
    if getattr(simulator, "rejected", 0):
        notes.append(f"{simulator.rejected} request(s) larger than the whole pool were refused")
    if getattr(simulator, "errors", 0):
        notes.append(f"{simulator.errors} request(s) failed with 'Context size has been exceeded.' (the unified KV "
                     "cache ran out: the server fails every slot's request)")
    return replace(rec.result(pool.engine, pool, end, tuple(notes)), reserved_blocks=rules.reserved_blocks)


# SGLang's token pool has pages of page_size tokens (1 by default); the simulator tracks it in 16-token pages, an
# approximation of its own (said in the result's notes), so that a step moves pages rather than single tokens
SGLANG_GRAIN = 16


def coarse_pool(pool: PoolSpec, grain: int) -> PoolSpec:
    scale = grain // pool.block_size
    return replace(pool, num_blocks=pool.num_blocks // scale, block_size=grain, block_bytes=pool.block_bytes * scale)


def _simulator(engine: str):
    if engine == "vllm":
        from .vllm import VllmSim
        return VllmSim
    if engine == "sglang":
        from .sglang import SglangSim
        return SglangSim
    if engine == "llamacpp":
        from .llamacpp import LlamacppSim
        return LlamacppSim
    raise ValueError(f"no simulator for engine {engine!r}")
